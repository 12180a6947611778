"""TF Privacy's modules that ``tf_dp.compat`` does not map, and what to use.

Importing one (``import tf_dp.compat.tensorflow_privacy.privacy.optimizers.
dp_optimizer_vectorized``, ``from ...privacy.optimizers import
dp_optimizer_vectorized``, or a module inside an unmapped package) raises
``UnmappedModuleError``, whose message names the replacement, where Python
would say "No module named ...". A finder consulted after Python's own
(``install``) answers for these names only; every other import is left to
Python.
"""

import sys
from typing import Any, Optional, Tuple

PACKAGE = "tf_dp.compat.tensorflow_privacy"
MIGRATION = "the migration table, docs/guides/migrating_from_tf_privacy.md"


class UnmappedModuleError(ImportError):
  """A TF Privacy module ``tf_dp.compat`` does not map; the message says
  what to use instead.

  An ``ImportError``, not a ``ModuleNotFoundError``: ``from package import
  module`` replaces a ``ModuleNotFoundError`` of that very module with its
  own bare message.
  """


_FTRL = (
    "DP-FTRL's tree aggregation: tf_dp adds noise correlated across steps "
    "by matrix factorization, which covers DP-FTRL's tree: "
    "tf_dp.DPOptimizer(..., noise_strategy=tf_dp.analysis."
    "matrix_factorization.tree_strategy(steps)) (or banded_strategy(steps, "
    "bands), less noise) with tf_dp.keras.make_private and fit(..., "
    "shuffle=False); its ledger gives epsilon through tf_dp.analysis."
    "compute_epsilon_from_ledger, and the mechanism alone is tf_dp.dp_query."
    "CorrelatedNoiseQuery")
_INTEGER_NOISE = (
    "integer noise for secure aggregation (discrete Gaussian, Skellam): no "
    "equivalent; for central DP use the Gaussian sum query "
    "(tf_dp.compat.tensorflow_privacy.GaussianSumQuery, or "
    "tf_dp.GaussianSumQuery(..., secure_mode=True) for noise from a "
    "floating-point hardened sampler)")
_ATTACKS = (
    "membership-inference tests: tf_dp.keras.loss_threshold_attack (the "
    "threshold attacks of run_attacks), tf_dp.keras.lira_attack with "
    "tf_dp.keras.train_shadow_models (advanced_mia), tf_dp.analysis."
    "membership_inference_report (TPR at low FPR, an epsilon lower bound) "
    "and tf_dp.analysis.plot_roc; trained attack classifiers, data slicing, "
    "secret_sharer and seq2seq attacks have no equivalent")
_FAST_CLIPPING = (
    "fast gradient clipping's internals: tf_dp.keras.make_private picks "
    "ghost norms and per-layer rules itself; register rules for your own "
    "layers with tf_dp.keras.fast.register_rule (TF Privacy's "
    "make_default_layer_registry() is mapped, and means tf_dp's rules)")

# TF Privacy module (under ``tensorflow_privacy.``) -> what to use instead.
UNMAPPED = {
    "v1": (
        "TF Privacy's compat.v1 names: import them from their modules, "
        "tf_dp.compat.tensorflow_privacy.privacy.optimizers.dp_optimizer "
        "(DPGradientDescentGaussianOptimizer, DPAdamGaussianOptimizer, ..., "
        "make_optimizer_class); the vectorized v1 optimizers and "
        "DNNClassifierV1 are not mapped"),
    "privacy.optimizers.dp_optimizer_vectorized": (
        "TF Privacy's vectorized compat.v1 optimizers (VectorizedDPSGD, "
        "VectorizedDPAdam, VectorizedDPAdagrad, "
        "make_vectorized_optimizer_class): use tf_dp.compat.tensorflow_privacy"
        ".privacy.optimizers.dp_optimizer's DPGradientDescentGaussianOptimizer,"
        " DPAdamGaussianOptimizer, DPAdagradGaussianOptimizer "
        "(make_gaussian_optimizer_class) with the same arguments by keyword "
        "(l2_norm_clip, noise_multiplier, num_microbatches, learning_rate) "
        "and population_size=: they compute the per-example gradients with "
        "tf.vectorized_map already"),
    "privacy.optimizers.dp_optimizer_keras_sparse": (
        "TF Privacy's sparse-gradient Keras optimizers: use "
        "tf_dp.compat.tensorflow_privacy.DPKerasSGDOptimizer (Adam, Adagrad) "
        "or tf_dp.DPOptimizer, which clip every layer's gradients, "
        "embeddings included"),
    "privacy.dp_query.tree_aggregation": _FTRL,
    "privacy.dp_query.tree_aggregation_query": _FTRL,
    "privacy.dp_query.quantile_adaptive_clip_tree_query": (
        _FTRL + "; adaptive clipping with independent noise is mapped: "
        "QuantileAdaptiveClipSumQuery"),
    "privacy.dp_query.restart_query": (
        _FTRL + "; a correlated-noise run covers the steps its strategy was "
        "built for, and a new run (a new DPOptimizer) starts afresh"),
    "privacy.dp_query.tree_range_query": (
        "range queries by tree aggregation (federated analytics): no "
        "equivalent"),
    "privacy.analysis.tree_aggregation_accountant": (
        _FTRL + "; the epsilon of a strategy is tf_dp.analysis."
        "correlated_noise_accounting.epsilon_after_steps"),
    "privacy.dp_query.discrete_gaussian_query": _INTEGER_NOISE,
    "privacy.dp_query.discrete_gaussian_utils": _INTEGER_NOISE,
    "privacy.dp_query.distributed_discrete_gaussian_query": _INTEGER_NOISE,
    "privacy.dp_query.distributed_skellam_query": _INTEGER_NOISE,
    "privacy.bolt_on": (
        "bolt-on DP (output perturbation for strongly convex losses, Wu et "
        "al. 2017): no equivalent; train with DP-SGD "
        "(tf_dp.compat.tensorflow_privacy.DPKerasSGDOptimizer, or "
        "tf_dp.DPOptimizer with tf_dp.keras.make_private)"),
    "privacy.estimators": (
        "TF Privacy's DP Estimator heads and canned Estimators (DNNClassifier"
        "): not mapped; write the model_fn with the compat.v1 optimizers of "
        "tf_dp.compat.tensorflow_privacy.privacy.optimizers.dp_optimizer "
        "(tf_dp.estimator; tf.estimator exists up to TF 2.15), or train with "
        "Keras (DPKerasSGDOptimizer, DPSequential)"),
    "privacy.membership_inference_attack": _ATTACKS,
    "privacy.privacy_tests": _ATTACKS,
    "privacy.fast_gradient_clipping.clip_grads": _FAST_CLIPPING,
    "privacy.fast_gradient_clipping.gradient_clipping_utils": _FAST_CLIPPING,
    "privacy.fast_gradient_clipping.registry_functions": _FAST_CLIPPING,
    "privacy.analysis.compute_noise_from_budget": (
        "TF Privacy's command: its library is mapped "
        "(privacy.analysis.compute_noise_from_budget_lib.compute_noise); "
        "tf_dp's command is tf_dp-compute-noise-multiplier (python -m "
        "tf_dp.cli.compute_noise_multiplier --help)"),
}


def unmapped_module(fullname: str) -> Optional[Tuple[str, str]]:
  """``(TF Privacy's module, what to use instead)`` if ``fullname`` is an
  unmapped module of ``tf_dp.compat.tensorflow_privacy`` or inside one;
  else None."""
  if not fullname.startswith(PACKAGE + "."):
    return None
  parts = fullname[len(PACKAGE) + 1:].split(".")
  for end in range(1, len(parts) + 1):
    name = ".".join(parts[:end])
    if name in UNMAPPED:
      return "tensorflow_privacy." + name, UNMAPPED[name]
  return None


class _UnmappedModuleFinder:
  """Raises ``UnmappedModuleError`` for the modules of ``UNMAPPED``; finds
  nothing else (Python's own finders come first)."""

  tf_dp_unmapped_module_finder = True

  def find_spec(self, fullname: str, path: Any = None,
                target: Any = None) -> None:
    del path, target
    found = unmapped_module(fullname)
    if found is None:
      return None
    tf_privacy_module, instead = found
    raise UnmappedModuleError(
        f"No module named {fullname!r}: tf_dp.compat does not map TF "
        f"Privacy's {tf_privacy_module}, {instead} ({MIGRATION}).",
        name=fullname)


def install() -> None:
  """Adds the finder to ``sys.meta_path``, after Python's own, once."""
  if not any(getattr(finder, "tf_dp_unmapped_module_finder", False)
             for finder in sys.meta_path):
    sys.meta_path.append(_UnmappedModuleFinder())
