"""TF Privacy's constructors as tf_dp's refusals name them.

A refusal met through ``tf_dp.compat.tensorflow_privacy`` names the
constructor the user called (``DPKerasSGDOptimizer``,
``DPGradientDescentGaussianOptimizer``, ``DPSequential``...) and its
arguments (``dp_sum_query``), not ``tf_dp.DPOptimizer``'s: see
``tf_dp.core.caller_api``.
"""

from tf_dp.core import caller_api

ADDED_NOTE = "a keyword tf_dp adds to TF Privacy's arguments"

# tf_dp arguments that refusals may name and that TF Privacy's Keras
# optimizers and models do not take (their other keywords go to Keras).
_KERAS_NOT_TAKEN = frozenset({
    "dp_query", "ledger", "sampling_probability", "noise_strategy",
    "max_passes", "privacy_unit", "max_examples_per_user"})


def keras_optimizer(constructor: str) -> caller_api.CallerApi:
  """A ``DPKeras*Optimizer`` (or ``make_keras_optimizer_class``'s) named
  ``constructor``: a ``tf_dp.DPOptimizer`` that ``compile`` converts its
  model for."""
  return caller_api.CallerApi(
      constructor, added=frozenset({"population_size", "sampling"}),
      added_note=ADDED_NOTE, not_taken=_KERAS_NOT_TAKEN,
      unconverted_model_fix=(
          f"{constructor} converts the model in compile only if it existed "
          f"before `model.compile` was looked up: create it on a line of "
          f"its own first (`optimizer = {constructor}(...)`, then "
          f"`model.compile(optimizer=optimizer, ...)`), as TF Privacy's "
          f"tutorials do."))


def keras_model(constructor: str) -> caller_api.CallerApi:
  """``DPSequential`` or ``DPModel``: the ``tf_dp.DPOptimizer`` their
  ``compile`` wraps around a plain optimizer."""
  return caller_api.CallerApi(
      constructor, added=frozenset({"population_size"}),
      added_note=ADDED_NOTE + f"; {constructor}'s compile takes it too",
      not_taken=_KERAS_NOT_TAKEN | {"sampling"},
      not_taken_call=("model.compile(optimizer=tf_dp.DPOptimizer(<the "
                      "optimizer>, ..., {setting}))"))


def v1_optimizer(constructor: str) -> caller_api.CallerApi:
  """A compat.v1 optimizer of ``privacy.optimizers.dp_optimizer``."""
  return caller_api.CallerApi(
      constructor, renamed=(("dp_query", "dp_sum_query"),),
      added=frozenset({"population_size", "sampling",
                       "sampling_probability"}),
      added_note=ADDED_NOTE)
