"""TF Privacy's ``quantile_adaptive_clip_sum_query``: tf_dp's adaptive clip.

Same arguments in the same order (Andrew et al. 2021), geometric or
arithmetic update, ``learning_rate`` 0 or a ``tf.Variable``.
"""

from tf_dp.dp_query import quantile_adaptive_clip_query


class QuantileAdaptiveClipSumQuery(
    quantile_adaptive_clip_query.QuantileAdaptiveClipSumQuery):
  """``tf_dp.QuantileAdaptiveClipSumQuery`` with TF Privacy's arguments.

  Privacy contract: that of ``tf_dp.QuantileAdaptiveClipSumQuery``.
  """

  def __init__(self, initial_l2_norm_clip, noise_multiplier,
               target_unclipped_quantile, learning_rate, clipped_count_stddev,
               expected_num_records, geometric_update=True):
    super().__init__(initial_l2_norm_clip, noise_multiplier,
                     target_unclipped_quantile, learning_rate,
                     clipped_count_stddev, expected_num_records,
                     geometric_update=geometric_update)
