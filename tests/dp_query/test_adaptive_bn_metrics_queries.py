"""Tests of adaptive clipping, batch-norm statistics and metrics queries."""

import math

import numpy as np
import pytest
import tensorflow as tf

from tf_dp.dp_query import BatchNormStatsQuery
from tf_dp.dp_query import DPMetricsQuery
from tf_dp.dp_query import QuantileAdaptiveClipSumQuery
from tf_dp.dp_query import effective_noise_multiplier
from tf_dp.dp_query import events
from tests.dp_query.test_gaussian_query import run_query


def test_adaptive_clip_converges_to_target_quantile():
  # Norms uniform on [0, 10]: the median is 5. No noise, lr 0.2, 200 steps.
  rng = np.random.default_rng(0)
  query = QuantileAdaptiveClipSumQuery(
      initial_l2_norm_clip=1.0, noise_multiplier=0.0,
      target_unclipped_quantile=0.5, learning_rate=0.2,
      clipped_count_stddev=0.0, expected_num_records=100)
  state = query.initial_global_state()
  for _ in range(200):
    records = [tf.constant([n], tf.float32) for n in rng.uniform(0, 10, 100)]
    _, state, _ = run_query(query, records, state)
  assert float(state.l2_norm_clip) == pytest.approx(5.0, rel=0.1)


def test_adaptive_clip_event_and_effective_noise():
  query = QuantileAdaptiveClipSumQuery(2.0, 1.0, 0.5, 0.2, 5.0, 100)
  _, _, event = run_query(query, [tf.constant([1.0])])
  flat = events.flatten_events(event)
  assert [float(e.l2_norm_clip) for e in flat] == [2.0, 0.5]
  assert [float(e.noise_stddev) for e in flat] == [2.0, 5.0]
  z = effective_noise_multiplier([2.0, 0.5], [2.0, 5.0])
  assert z == pytest.approx((1.0 ** -2 + (2 * 5.0) ** -2) ** -0.5)


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


def test_metrics_query_counts_without_noise():
  query = DPMetricsQuery(num_classes=3, stddev=0.0)
  labels = [0, 1, 2, 2]
  preds = [[0.9, 0.1, 0.0], [0.9, 0.1, 0.0], [0.0, 0.0, 1.0], [0.0, 1.0, 0.0]]
  records = [(tf.constant(l), tf.constant(p)) for l, p in zip(labels, preds)]
  result, _, event = run_query(query, records)
  assert float(result["count"]) == 4.0
  assert float(result["correct"]) == 2.0
  np.testing.assert_allclose(result["class_counts"], [1.0, 1.0, 2.0])
  assert float(result["accuracy"]) == pytest.approx(0.5)
  assert float(event.l2_norm_clip) == pytest.approx(math.sqrt(3))


def test_metrics_query_noise_statistics():
  # 20000 independent samples of one noised count: 2% tolerance > 4 sd.
  query = DPMetricsQuery(num_classes=2, stddev=4.0, noise_seed=5)
  state = query.initial_global_state()
  counts = []
  # Draw many samples cheaply by noising zero states in a tf.function.
  sample = query.initial_sample_state()

  @tf.function
  def draws(state):
    out = []
    for _ in range(50):
      res, state, _ = query.get_noised_result(sample, state)
      out.append(res["count"])
    return tf.stack(out), state

  for _ in range(400):
    values, state = draws(state)
    counts.append(values.numpy())
  assert np.std(np.concatenate(counts)) == pytest.approx(4.0, rel=0.02)
