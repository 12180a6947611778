"""Tests of tf_dp.reproductions.audit.broken_queries: each broken query
claims a correct GaussianSumQuery's event but skips exactly one of clipping
or noise (the audits' tests show that the audits catch them)."""

import numpy as np
import tensorflow as tf

from tf_dp.dp_query import GaussianSumQuery
from tf_dp.reproductions.audit import ClipOffQuery
from tf_dp.reproductions.audit import NoiseOffQuery

RECORDS = [[tf.constant([3.0, 4.0])], [tf.constant([0.3, 0.4])]]  # 5, 0.5


def _sum(query):
  state = query.initial_global_state()
  params = query.derive_sample_params(state)
  sample = query.initial_sample_state(RECORDS[0])
  for record in RECORDS:
    sample = query.accumulate_record(params, sample, record)
  result, _, event = query.get_noised_result(sample, state)
  return result[0].numpy(), event


def test_noise_off_returns_the_clipped_sum_but_claims_the_noise():
  result, event = _sum(NoiseOffQuery(1.0, 2.0))
  np.testing.assert_allclose(result, [0.6 + 0.3, 0.8 + 0.4], rtol=1e-6)
  assert float(event.noise_stddev) == 2.0
  assert float(event.l2_norm_clip) == 1.0


def test_clip_off_returns_the_unclipped_sum_but_claims_the_clip():
  result, event = _sum(ClipOffQuery(1.0, 0.0))
  np.testing.assert_allclose(result, [3.3, 4.4], rtol=1e-6)
  assert float(event.l2_norm_clip) == 1.0
  scales, _ = ClipOffQuery(1.0, 0.0).record_scales(
      1.0, [tf.constant([25.0, 0.25])])
  np.testing.assert_array_equal(scales[0], [1.0, 1.0])
  # A correct query clips the same records.
  correct, _ = _sum(GaussianSumQuery(1.0, 0.0))
  np.testing.assert_allclose(correct, [0.9, 1.2], rtol=1e-6)
