"""TF Privacy's ``quantile_adaptive_clip_sum_query``: tf_dp's adaptive clip.

Same arguments in the same order (Andrew et al. 2021); tf_dp's update is
geometric, TF Privacy's default, so ``geometric_update=False`` (arithmetic
update) is refused.
"""

from tf_dp.dp_query import quantile_adaptive_clip_query


class QuantileAdaptiveClipSumQuery(
    quantile_adaptive_clip_query.QuantileAdaptiveClipSumQuery):
  """``tf_dp.QuantileAdaptiveClipSumQuery`` with TF Privacy's arguments.

  Privacy contract: that of ``tf_dp.QuantileAdaptiveClipSumQuery``.

  Raises:
    ValueError: if ``geometric_update`` is False (not implemented by tf_dp).
  """

  def __init__(self, initial_l2_norm_clip, noise_multiplier,
               target_unclipped_quantile, learning_rate, clipped_count_stddev,
               expected_num_records, geometric_update=True):
    if geometric_update is not True:
      raise ValueError(
          "geometric_update must be True: tf_dp's adaptive clipping updates "
          "the clip geometrically, C <- C exp(-learning_rate (fraction - "
          f"target)); got geometric_update={geometric_update!r}.")
    super().__init__(initial_l2_norm_clip, noise_multiplier,
                     target_unclipped_quantile, learning_rate,
                     clipped_count_stddev, expected_num_records)
