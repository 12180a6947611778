"""TF Privacy's ``quantile_estimator_query``: tf_dp's quantile estimators.

Same arguments in the same order; as in TF Privacy the update is
arithmetic unless ``geometric_update=True``. The global state and sample
parameters have TF Privacy's names and nesting:
``QuantileEstimatorState(current_estimate, target_quantile, learning_rate,
below_estimate_state)``, where ``below_estimate_state`` is the state of the
normalized Gaussian sum query on the records' bits
(``NormalizedState(GaussianSumState(l2_norm_clip=0.5, stddev, noise_nonce),
denominator)``), and ``QuantileEstimatorParams(current_estimate,
below_estimate_params)``. ``target_quantile`` and ``learning_rate`` in the
state show the query's (a ``tf.Variable`` learning rate is read at every
update); set them in the constructor. ``TreeQuantileEstimatorQuery`` maps
onto tf_dp's estimator with independent noise per sample (it warns; see its
docstring).
"""

import collections
from typing import TYPE_CHECKING
import warnings

import tensorflow as tf

from tf_dp.dp_query import gaussian_query
from tf_dp.dp_query import normalized_query
from tf_dp.dp_query import quantile_estimator_query

TREE_NOISE_WARNING = (
    "TreeQuantileEstimatorQuery: tf_dp adds independent Gaussian noise of "
    "stddev below_estimate_stddev to each sample's below-estimate count, "
    "recorded in the privacy ledger with the lot's sampling and composed "
    "over steps. TF Privacy correlated that noise across steps by tree "
    "aggregation (Kairouz et al. 2021), which its ledger did not account "
    "for. Each step then costs what TF Privacy's QuantileEstimatorQuery "
    "costs, and the estimate is noisier than with tree aggregation; a "
    "smaller learning_rate smooths it.")


QuantileEstimatorState = collections.namedtuple(
    "QuantileEstimatorState",
    ["current_estimate", "target_quantile", "learning_rate",
     "below_estimate_state"])
QuantileEstimatorParams = collections.namedtuple(
    "QuantileEstimatorParams", ["current_estimate", "below_estimate_params"])


if TYPE_CHECKING:
  # What the mixin is mixed into: its ``super()`` and attributes.
  _Estimator = quantile_estimator_query.QuantileEstimatorQuery
else:
  _Estimator = object


class _TFPrivacyState(_Estimator):
  """TF Privacy's state and parameters around a tf_dp quantile estimator
  (the computation is tf_dp's, on the state converted back)."""

  _GlobalState = QuantileEstimatorState
  _SampleParams = QuantileEstimatorParams

  def _to_tf_privacy(self, state):
    bits = gaussian_query.GaussianSumState(
        tf.constant(0.5), state.below_estimate_stddev, state.noise_nonce)
    learning_rate = (self._lr if isinstance(self._lr, tf.Variable)
                     else tf.constant(self._lr, tf.float32))
    return QuantileEstimatorState(
        state.estimate, tf.constant(self._target, tf.float32), learning_rate,
        normalized_query.NormalizedState(
            bits, tf.constant(self._expected, tf.float32)))

  def _to_tf_dp(self, state):
    bits = state.below_estimate_state.numerator_state
    return quantile_estimator_query.QuantileEstimatorState(
        state.current_estimate, bits.stddev, bits.noise_nonce)

  def initial_global_state(self):
    return self._to_tf_privacy(super().initial_global_state())

  def derive_sample_params(self, global_state):
    return QuantileEstimatorParams(
        global_state.current_estimate,
        global_state.below_estimate_state.numerator_state.l2_norm_clip)

  def preprocess_record(self, params, record):
    # A record that is not a scalar is refused before params are read.
    return super().preprocess_record(
        None if params is None else params.current_estimate, record)

  def get_noised_result(self, sample_state, global_state):
    estimate, state, event = super().get_noised_result(
        sample_state, self._to_tf_dp(global_state))
    return estimate, self._to_tf_privacy(state), event

  def derive_metrics(self, global_state):
    return {"estimate": global_state.current_estimate}

  def reset_state(self, noised_results, global_state):
    """TF Privacy's hook after each result: nothing to reset."""
    del noised_results
    return global_state


class QuantileEstimatorQuery(_TFPrivacyState,
                             quantile_estimator_query.QuantileEstimatorQuery):
  """``tf_dp.QuantileEstimatorQuery`` with TF Privacy's arguments and state.

  Privacy contract: that of ``tf_dp.QuantileEstimatorQuery``.
  """

  def __init__(self, initial_estimate, target_quantile, learning_rate,
               below_estimate_stddev, expected_num_records,
               geometric_update=False):
    super().__init__(initial_estimate, target_quantile, learning_rate,
                     below_estimate_stddev, expected_num_records,
                     geometric_update=geometric_update)


class NoPrivacyQuantileEstimatorQuery(
    _TFPrivacyState, quantile_estimator_query.NoPrivacyQuantileEstimatorQuery):
  """``tf_dp.NoPrivacyQuantileEstimatorQuery`` with TF Privacy's arguments
  and state (epsilon = inf if recorded in a ledger)."""

  def __init__(self, initial_estimate, target_quantile, learning_rate,
               geometric_update=False):
    super().__init__(initial_estimate, target_quantile, learning_rate,
                     geometric_update=geometric_update)


class TreeQuantileEstimatorQuery(QuantileEstimatorQuery):
  """TF Privacy's tree-aggregated estimator, mapped onto
  ``tf_dp.QuantileEstimatorQuery`` (same arguments; warns).

  Privacy contract: that of ``tf_dp.QuantileEstimatorQuery``: each sample's
  below-estimate count (each record contributes a bit, sensitivity 0.5
  after centring) gets fresh N(0, below_estimate_stddev^2) noise, recorded
  as one Gaussian sum query of the sample in the ledger. There is no
  tree-aggregated (cross-step correlated) noise.
  """

  def __init__(self, initial_estimate, target_quantile, learning_rate,
               below_estimate_stddev, expected_num_records,
               geometric_update=False):
    warnings.warn(TREE_NOISE_WARNING, UserWarning, stacklevel=2)
    super().__init__(initial_estimate, target_quantile, learning_rate,
                     below_estimate_stddev, expected_num_records,
                     geometric_update=geometric_update)
