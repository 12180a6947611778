"""``DPOptimizer``: DP-SGD for any Keras optimizer, on Keras 3 and Keras 2.

Usage (two extra lines against non-private training)::

  model = tf_dp.keras.make_private(model)
  model.compile(optimizer=tf_dp.DPOptimizer(
                    keras.optimizers.SGD(0.1), l2_norm_clip=1.0,
                    noise_multiplier=1.1, population_size=len(x_train)),
                loss=keras.losses.SparseCategoricalCrossentropy(
                    from_logits=True),
                metrics=["accuracy"])
  model.fit(x_train, y_train, batch_size=256, epochs=5)
  eps = tf_dp.analysis.compute_epsilon_from_ledger(
      model.optimizer.ledger, delta=1e-5)
"""

from typing import Any, Optional, Union

from tf_dp.core import config as config_lib
from tf_dp.dp_query.dp_query import DPQuery
from tf_dp.keras import backend
from tf_dp.keras import flavor_classes
from tf_dp.keras.optimizer_base import DPOptimizerMixin
from tf_dp.keras.optimizer_base import is_dp_optimizer
from tf_dp.privacy_ledger import PrivacyLedger
from tf_dp.sampling import PrivacyUnit
from tf_dp.sampling import Sampling


class _DPOptimizerType(type):
  """``isinstance(x, DPOptimizer)`` holds for the DP optimizer of every
  Keras flavour (they subclass their flavour's ``Optimizer`` base, so they
  cannot share one Python base class besides the mixin)."""

  def __instancecheck__(cls, instance: Any) -> bool:
    return is_dp_optimizer(instance)

  def __subclasscheck__(cls, subclass: Any) -> bool:
    return isinstance(subclass, type) and issubclass(subclass,
                                                      DPOptimizerMixin)


class DPOptimizer(metaclass=_DPOptimizerType):
  """Wraps a Keras optimizer so that it trains with DP-SGD.

  Privacy contract: for each record (one example, or one microbatch of
  ``batch_size / num_microbatches`` examples, whose gradient is that of its
  mean loss; or, with ``privacy_unit="user"``, one user, whose gradient is
  the SUM of the gradients of the user's examples in the lot) the gradient
  is clipped to ``l2_norm_clip`` (by the ``DPQuery``); the clipped gradients
  of a lot (``gradient_accumulation_steps`` batches) are summed and
  N(0, (noise_multiplier * l2_norm_clip)^2 I) is added **once per lot**; the
  sum is divided by the lot's number of records (fixed-size sampling) or by
  its expected number ``q * n`` (Poisson); regularisation losses, which do not
  depend on the data, are added outside the clipped sum; the wrapped
  optimizer applies the result. The ledger records one sample per lot:
  ``(n, q, sampling, examples_per_record, privacy_unit)`` and every
  Gaussian sum query; with ``privacy_unit="user"``, n counts users and q is
  the probability that a user is in a lot, so epsilon is per user.

  Args:
    optimizer: A Keras optimizer (Keras 3 or Keras 2; any algorithm) or its
      name. Its flavour selects the flavour of the returned optimizer.
    l2_norm_clip: Clip norm C (total over all variables).
    noise_multiplier: z; the noise stddev is z * C.
    num_microbatches: None (each example is a record) or M, the number of
      microbatches per batch (the batch size must be a multiple of M).
    gradient_accumulation_steps: Batches per lot (noise once per lot).
    dp_query: A custom ``tf_dp.DPQuery`` whose noised result is the SUM of
      the lot's records (e.g. ``tf_dp.build_query(...)``, a joint-clipping or
      adaptive-clipping query). Replaces l2_norm_clip and noise_multiplier.
    ledger: A ``tf_dp.PrivacyLedger``; by default one is created from
      ``population_size`` and ``sampling``. Read it as ``.ledger``.
    population_size: Number of training examples n. Without it (and
      without a ledger), with ``sampling="shuffled"``, each ``fit`` of a
      ``make_private`` model takes n from the arrays it trains on (their
      length less the ``validation_split`` part) and the ledger records
      that n with every sample; a ``tf.data`` pipeline, a generator or a
      custom loop then fails at its first step, before any update, asking
      for it. A given n larger than the arrays warns (it understates
      epsilon unless the arrays were drawn at random from the n).
    sampling: ``"shuffled"`` (default: Keras ``fit`` on arrays or a
      shuffled dataset; accounted as fixed-size sampling without
      replacement, the conventional approximation, with a warning from the
      accountant), ``"fixed_size"`` (lots from
      ``tf_dp.data.fixed_size_sampled_batches``: independent uniform subsets,
      replace-one neighbours) or ``"poisson"`` (lots from
      ``tf_dp.data.poisson_sampled_batches``; add/remove neighbours). The
      last two are guarantees; ``fit`` on arrays or tensors, which Keras
      batches itself, refuses them before any step. Under ``"shuffled"``,
      ``fit`` refuses an order it cannot show random (``shuffle=False``, a
      pipeline without a shuffle before batching, a generator:
      ``tf_dp.keras.fit_order``); ``"fixed_order"`` declares such an order
      and accounts each pass as one Gaussian mechanism per example, without
      amplification (``tf_dp.analysis.fixed_order``).
    sampling_probability: q for ``"poisson"``: the probability that an
      example is in a lot (of ``gradient_accumulation_steps`` batches).
    clipping: How the clip is allocated across layers when no dp_query is
      given (McMahan & Andrew 2018): ``"flat"``, ``"per_layer"`` or
      ``"dimensionality_adjusted"``.
    noise_allocation: How the noise is allocated across layers when no
      dp_query is given: ``"proportional"`` or ``"dimensionality_adjusted"``.
    max_lots: Ledger capacity (number of lots in the whole run).
    per_example_method: ``"auto"`` (default): per-record norms from one
      batched pass with ghost norms and per-layer rules
      (``tf_dp.keras.fast``) when the model and query allow it, otherwise
      per-example gradients with ``tf.vectorized_map`` (logged with the
      reason); ``"fast"`` (error if unavailable); ``"vectorized"``. All give
      the same clipped sum (to float rounding).
    metrics_noise_stddev: If set, training accuracy is also estimated
      privately: each example contributes (1, correct, one-hot label), a
      vector of norm <= sqrt(3), and N(0, metrics_noise_stddev^2) is added to
      the counts once per lot, in the same ledger sample. ``fit`` then logs
      ``dp_accuracy`` (computed from the noised counts of the last lot).
    privacy_unit: ``"example"`` (default) or ``"user"``: what one record
      is, and what epsilon protects (``tf_dp.sampling.PrivacyUnit``). With
      ``"user"``, train on lots of ``tf_dp.data.poisson_sampled_users``
      (``sampling="poisson"``) or ``fixed_size_sampled_users``
      (``"fixed_size"``): each user's ``max_examples_per_user``
      consecutive rows of a batch are one record, ``population_size`` is
      the number of users and ``sampling_probability`` the q over users.
    max_examples_per_user: k, the rows per user of those lots (with
      ``privacy_unit="user"`` only).
    secure_mode: Draw the noise from the operating system's cryptographic
      generator with a floating-point hardened Gaussian sampler
      (``tf_dp.dp_query.noise``): slower, and not available under XLA. In
      both modes the noise key never leaves the process.
    noise_strategy: A ``tf_dp.analysis.matrix_factorization.Strategy``
      (``banded_strategy(steps, bands)`` or ``tree_strategy(steps)``) to
      add noise correlated across lots instead of independent noise: lot t
      gets ``w_t`` of ``w = C^+ z`` (``tf_dp.dp_query.CorrelatedNoiseQuery``)
      and the ledger carries one correlated-noise record, accounted from
      the strategy's sensitivity for the passes run (no sampling
      amplification). ``fit`` then takes arrays with ``shuffle=False``
      (one fixed order, so one example's participations are a pass apart)
      and refuses, before any step, more steps than the strategy was built
      for or more passes than ``max_passes``. The model cannot be saved
      with its optimizer to Keras files (save the weights); checkpoints
      and SavedModels hold no noise state, so a run restored from one
      cannot continue its correlated noise.
    max_passes: With ``noise_strategy``: the most passes (epochs) the run
      may make.
    name: Optional name.

  Returns:
    A Keras 3 or Keras 2 optimizer, matching ``optimizer`` (an instance of
    that flavour's ``Optimizer``; ``isinstance(opt, tf_dp.DPOptimizer)``
    holds for both).

  Raises:
    ValueError: on invalid arguments, naming the argument (a
      ``tf_dp.errors.PrivacyError`` for arguments that cannot be combined
      without breaking the guarantee or its accounting).
    RuntimeError: with TensorFlow 2 behaviour off
      (``tf.compat.v1.disable_v2_behavior()``; Estimator code uses
      ``tf_dp.estimator``'s optimizers).
  """

  def __new__(cls, optimizer: Any, l2_norm_clip: Optional[float] = None,
              noise_multiplier: Optional[float] = None,
              num_microbatches: Optional[int] = None,
              gradient_accumulation_steps: int = 1,
              dp_query: Optional[DPQuery] = None,
              ledger: Optional[PrivacyLedger] = None,
              population_size: Optional[int] = None,
              sampling: Union[Sampling, str] = Sampling.SHUFFLED,
              sampling_probability: Optional[float] = None,
              clipping: str = "flat", noise_allocation: str = "proportional",
              max_lots: int = 100000, per_example_method: str = "auto",
              metrics_noise_stddev: Optional[float] = None,
              secure_mode: bool = False, noise_strategy: Any = None,
              max_passes: int = 1,
              privacy_unit: Union[PrivacyUnit, str] = PrivacyUnit.EXAMPLE,
              max_examples_per_user: Optional[int] = None,
              name: Optional[str] = None) -> Any:
    del cls  # Returns the optimizer of the wrapped optimizer's flavour.
    inner = (backend.default().get_optimizer(optimizer)
             if isinstance(optimizer, str) else optimizer)
    return from_dp_config(inner, config_lib.DPConfig(
        l2_norm_clip=l2_norm_clip, noise_multiplier=noise_multiplier,
        num_microbatches=num_microbatches,
        gradient_accumulation_steps=gradient_accumulation_steps,
        dp_query=dp_query, ledger=ledger, population_size=population_size,
        sampling=Sampling.check("sampling", sampling),
        sampling_probability=sampling_probability,
        clipping=clipping, noise_allocation=noise_allocation,
        max_lots=max_lots, per_example_method=per_example_method,
        metrics_noise_stddev=metrics_noise_stddev, secure_mode=secure_mode,
        noise_strategy=noise_strategy, max_passes=max_passes,
        privacy_unit=PrivacyUnit.check("privacy_unit", privacy_unit),
        max_examples_per_user=max_examples_per_user), name=name)


def from_dp_config(optimizer: Any, config: config_lib.DPConfig,
                   name: Optional[str] = None) -> Any:
  """The ``DPOptimizer`` of ``optimizer``'s Keras flavour for a validated
  ``config``: for front ends that build the ``DPConfig`` themselves (with
  their own ``caller``, e.g. ``tf_dp.compat``).

  Privacy contract: that of ``DPOptimizer`` with ``config``'s arguments.
  """
  dp_class = flavor_classes.dp_optimizer_class(backend.for_object(optimizer))
  return dp_class(optimizer, config, name=name)
