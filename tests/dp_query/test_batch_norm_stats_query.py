"""Tests of BatchNormStatsQuery: batch moments without noise, and one
record's bounded contribution."""

import math

import numpy as np
import pytest
import tensorflow as tf

from tf_dp.dp_query import BatchNormStatsQuery
from tests.dp_query.test_gaussian_query import run_query


def test_batch_norm_stats_match_batch_moments_without_noise():
  rng = np.random.default_rng(1)
  acts = rng.normal(2.0, 3.0, size=(8, 5, 5, 4)).astype(np.float32)
  query = BatchNormStatsQuery(l2_norm_clip=1e6, stddev=0.0,
                              expected_num_records=8)
  result, _, event = run_query(query, [tf.constant(a) for a in acts])
  np.testing.assert_allclose(result["mean"], acts.mean(axis=(0, 1, 2)),
                             rtol=1e-5)
  np.testing.assert_allclose(result["variance"], acts.var(axis=(0, 1, 2)),
                             rtol=1e-4)
  assert float(event.l2_norm_clip) == 1e6


def test_batch_norm_stats_contribution_is_bounded():
  query = BatchNormStatsQuery(1.0, 0.0, 1)
  rec = query.preprocess_record(1.0, tf.fill([3, 3, 2], 100.0))
  norm = math.sqrt(sum(float(tf.reduce_sum(x * x)) for x in rec))
  assert norm == pytest.approx(1.0, rel=1e-6)
