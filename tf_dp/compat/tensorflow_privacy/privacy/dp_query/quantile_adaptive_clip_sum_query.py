"""TF Privacy's ``quantile_adaptive_clip_sum_query``: tf_dp's adaptive clip.

Same arguments in the same order (Andrew et al. 2021), geometric or
arithmetic update, ``learning_rate`` 0 or a ``tf.Variable``; an initial
clip of 0 (arithmetic update only) starts at tf_dp's smallest clip, 1e-12.
The global state and sample parameters have TF Privacy's names and nesting:
``AdaptiveClipState(noise_multiplier, sum_state, quantile_estimator_state)``
with ``sum_state`` the Gaussian sum query's state
(``GaussianSumState(l2_norm_clip, stddev, noise_nonce)``) and
``quantile_estimator_state`` that of ``QuantileEstimatorQuery`` (its
``current_estimate`` is the clip); ``AdaptiveClipParams(sum_params,
quantile_estimator_params)``.
"""

import collections

import tensorflow as tf

from tf_dp.compat.tensorflow_privacy.privacy.dp_query import quantile_estimator_query as estimator
from tf_dp.dp_query import dp_query
from tf_dp.dp_query import gaussian_query
from tf_dp.dp_query import normalized_query
from tf_dp.dp_query import quantile_adaptive_clip_query

AdaptiveClipState = collections.namedtuple(
    "AdaptiveClipState",
    ["noise_multiplier", "sum_state", "quantile_estimator_state"])
AdaptiveClipParams = collections.namedtuple(
    "AdaptiveClipParams", ["sum_params", "quantile_estimator_params"])


class QuantileAdaptiveClipSumQuery(
    quantile_adaptive_clip_query.QuantileAdaptiveClipSumQuery,
    dp_query.SumAggregationDPQuery):
  """``tf_dp.QuantileAdaptiveClipSumQuery`` with TF Privacy's arguments and
  state.

  Privacy contract: that of ``tf_dp.QuantileAdaptiveClipSumQuery``.
  """

  _GlobalState = AdaptiveClipState
  _SampleParams = AdaptiveClipParams

  def __init__(self, initial_l2_norm_clip, noise_multiplier,
               target_unclipped_quantile, learning_rate, clipped_count_stddev,
               expected_num_records, geometric_update=True):
    if not geometric_update and initial_l2_norm_clip == 0:
      initial_l2_norm_clip = quantile_adaptive_clip_query.MIN_CLIP
    super().__init__(initial_l2_norm_clip, noise_multiplier,
                     target_unclipped_quantile, learning_rate,
                     clipped_count_stddev, expected_num_records,
                     geometric_update=geometric_update)

  def _to_tf_privacy(self, state):
    learning_rate = (self._lr if isinstance(self._lr, tf.Variable)
                     else tf.constant(self._lr, tf.float32))
    bits = gaussian_query.GaussianSumState(
        tf.constant(0.5), state.clipped_count_stddev, state.noise_nonce)
    return AdaptiveClipState(
        state.noise_multiplier,
        gaussian_query.GaussianSumState(
            state.l2_norm_clip, state.noise_multiplier * state.l2_norm_clip,
            state.noise_nonce),
        estimator.QuantileEstimatorState(
            state.l2_norm_clip, tf.constant(self._target, tf.float32),
            learning_rate, normalized_query.NormalizedState(
                bits, tf.constant(self._expected, tf.float32))))

  def _to_tf_dp(self, state):
    bits = state.quantile_estimator_state.below_estimate_state.numerator_state
    return quantile_adaptive_clip_query.AdaptiveClipState(
        state.sum_state.l2_norm_clip, state.noise_multiplier, bits.stddev,
        state.sum_state.noise_nonce)

  def initial_global_state(self):
    return self._to_tf_privacy(super().initial_global_state())

  def derive_sample_params(self, global_state):
    clip = global_state.sum_state.l2_norm_clip
    return AdaptiveClipParams(clip, estimator.QuantileEstimatorParams(
        clip, tf.constant(0.5)))

  def preprocess_record(self, params, record):
    return super().preprocess_record(params.sum_params, record)

  def record_scales(self, params, sq_norms):
    return super().record_scales(params.sum_params, sq_norms)

  def get_noised_result(self, sample_state, global_state):
    result, state, event = super().get_noised_result(
        sample_state, self._to_tf_dp(global_state))
    return result, self._to_tf_privacy(state), event

  def derive_metrics(self, global_state):
    return {"clip": global_state.sum_state.l2_norm_clip}
