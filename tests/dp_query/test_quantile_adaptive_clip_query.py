"""Tests of QuantileAdaptiveClipSumQuery: the clip follows the target
quantile; its event holds both noised sums."""

import numpy as np
import pytest
import tensorflow as tf

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
  # One traced step, each of the 100 records accumulated as run_query does.
  step = tf.function(lambda norms, state: run_query(
      query, [norms[i:i + 1] for i in range(100)], state)[1])
  state = query.initial_global_state()
  for _ in range(200):
    state = step(tf.constant(rng.uniform(0, 10, 100), tf.float32), state)
  assert float(state.l2_norm_clip) == pytest.approx(5.0, rel=0.1)


def test_adaptive_clip_event_and_effective_noise():
  query = QuantileAdaptiveClipSumQuery(2.0, 1.0, 0.5, 0.2, 5.0, 100)
  _, _, event = run_query(query, [tf.constant([1.0])])
  flat = events.flatten_events(event)
  assert [float(e.l2_norm_clip) for e in flat] == [2.0, 0.5]
  assert [float(e.noise_stddev) for e in flat] == [2.0, 5.0]
  z = effective_noise_multiplier([2.0, 0.5], [2.0, 5.0])
  assert z == pytest.approx((1.0 ** -2 + (2 * 5.0) ** -2) ** -0.5)
