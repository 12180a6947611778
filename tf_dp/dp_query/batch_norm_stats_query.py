"""DP estimates of batch-normalisation statistics (McMahan & Andrew, Sec. 1).

Each record contributes the per-feature mean of its activations ``a`` (over
all axes but the last, e.g. spatial positions) and of their squares ``a^2``,
clipped jointly to L2 norm ``l2_norm_clip``. A Gaussian sum query adds noise
once; dividing by the public expected number of records gives the mean and
the second moment, from which ``variance = max(E[a^2] - mean^2, 0)``.
"""

import collections
from typing import Dict, Optional, Tuple

import tensorflow as tf

from tf_dp.analysis import checks
from tf_dp.dp_query import dp_query
from tf_dp.dp_query import gaussian_query
from tf_dp.dp_query.dp_query import Nest

BatchNormStats = collections.namedtuple("BatchNormStats",
                                        ["sum", "sum_of_squares"])


def per_record_moments(activations: tf.Tensor) -> Nest:
  """The record of one example: per-feature mean of a and a^2."""
  a = tf.convert_to_tensor(activations)
  a = tf.reshape(a, [-1, a.shape[-1]])
  return BatchNormStats(tf.reduce_mean(a, axis=0),
                        tf.reduce_mean(tf.square(a), axis=0))


class BatchNormStatsQuery(dp_query.SumAggregationDPQuery):
  """Per-feature mean and variance of activations, with DP.

  Privacy contract: each record's (mean, mean of squares) pair is clipped to
  L2 norm ``l2_norm_clip``; N(0, stddev^2) is added once to each summed
  coordinate; event ``SumQueryEvent(l2_norm_clip, stddev)``. Used in a
  ``NestedQuery`` with the gradient query, it lands in the same ledger sample.

  Args:
    l2_norm_clip: Joint clip of one record's statistics, >= 0.
    stddev: Noise stddev >= 0.
    expected_num_records: Public denominator q * n, > 0.
    noise_seed: None for OS entropy (default).
    secure_mode: As for ``GaussianSumQuery``.

  ``get_noised_result`` returns ``{"mean": ..., "variance": ...}``.
  """

  def __init__(self, l2_norm_clip: float, stddev: float,
               expected_num_records: float, noise_seed: Optional[int] = None,
               secure_mode: bool = False) -> None:
    self._sum_query = gaussian_query.GaussianSumQuery(l2_norm_clip, stddev,
                                                      noise_seed, secure_mode)
    self._expected = checks.check_positive("expected_num_records",
                                           expected_num_records)

  def initial_global_state(self) -> Nest:
    return self._sum_query.initial_global_state()

  def derive_sample_params(self, global_state: Nest) -> Nest:
    return self._sum_query.derive_sample_params(global_state)

  def initial_sample_state(self, template: Nest = None) -> Nest:
    if not isinstance(template, BatchNormStats):
      n = tf.TensorSpec([template.shape[-1]], tf.float32)
      template = BatchNormStats(n, n)
    return super().initial_sample_state(template)

  def preprocess_record(self, params: Nest, record: Nest) -> Nest:
    if not isinstance(record, BatchNormStats):
      record = per_record_moments(record)
    return self._sum_query.preprocess_record(params, record)

  @property
  def sum_query(self) -> gaussian_query.GaussianSumQuery:
    """The underlying Gaussian sum query on ``BatchNormStats`` records."""
    return self._sum_query

  @staticmethod
  def statistics(noised_sums: Nest,
                 denominator: tf.Tensor) -> Dict[str, tf.Tensor]:
    """Mean and variance (clipped at 0) from noised sums (post-processing)."""
    mean = noised_sums.sum / denominator
    variance = tf.maximum(noised_sums.sum_of_squares / denominator
                          - tf.square(mean), 0.0)
    return {"mean": mean, "variance": variance}

  def get_noised_result(self, sample_state: Nest,
                        global_state: Nest) -> Tuple[Nest, Nest, Nest]:
    noised, new_state, event = self._sum_query.get_noised_result(
        sample_state, global_state)
    return self.statistics(noised, self._expected), new_state, event
