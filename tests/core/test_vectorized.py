"""Per-record gradients to a clipped sum (tf_dp.core.vectorized)."""

import numpy as np
import tensorflow as tf

from tf_dp import dp_query
from tf_dp.core import vectorized


def _reference(records, clip, weights=None):
  """Clip each record (all its leaves together) to ``clip`` and sum, in
  float64 by a Python loop."""
  n = records[0].shape[0]
  weights = np.ones(n) if weights is None else weights
  total = [np.zeros(r.shape[1:]) for r in records]
  for i in range(n):
    parts = [np.asarray(r[i], np.float64) for r in records]
    norm = np.sqrt(sum(np.sum(p * p) for p in parts))
    scale = min(1.0, clip / norm) if norm > 0 else 1.0
    total = [t + weights[i] * scale * p for t, p in zip(total, parts)]
  return total


def test_clipped_sum_equals_the_per_record_loop():
  rng = np.random.default_rng(0)
  records = [rng.normal(size=(7, 3, 2)).astype(np.float32) * 2,
             rng.normal(size=(7, 4)).astype(np.float32)]
  query = dp_query.GaussianSumQuery(1.5, 0.0)
  params = query.derive_sample_params(query.initial_global_state())
  got = vectorized.clipped_sum(query, params,
                               [tf.constant(r) for r in records])
  # float32 clipping against a float64 loop.
  for g, want in zip(got, _reference(records, 1.5)):
    np.testing.assert_allclose(g.numpy(), want, rtol=1e-5, atol=1e-6)


def test_records_of_weight_zero_are_left_out():
  rng = np.random.default_rng(1)
  records = [rng.normal(size=(5, 3)).astype(np.float32) * 3]
  weights = np.array([1, 0, 1, 0, 1], np.float32)
  query = dp_query.GaussianSumQuery(1.0, 0.0)
  params = query.derive_sample_params(query.initial_global_state())
  got = vectorized.clipped_sum(query, params, [tf.constant(records[0])],
                               weights=tf.constant(weights))
  np.testing.assert_allclose(got[0].numpy(),
                             _reference(records, 1.0, weights)[0],
                             rtol=1e-5, atol=1e-6)


def test_one_record_replaced_moves_the_clipped_sum_by_at_most_2c():
  rng = np.random.default_rng(2)
  records = rng.normal(size=(8, 6)).astype(np.float32) * 4
  neighbour = records.copy()
  neighbour[5] = -40.0 * records[5]
  query = dp_query.GaussianSumQuery(0.7, 0.0)
  params = query.derive_sample_params(query.initial_global_state())
  sums = [vectorized.clipped_sum(query, params, [tf.constant(r)])[0].numpy()
          for r in (records, neighbour)]
  # Opposite records reach the bound 2C; float32 rounding stays below 1e-5.
  assert 1.99 * 0.7 < np.linalg.norm(sums[0] - sums[1]) <= 2 * 0.7 + 1e-5


def test_a_non_finite_record_contributes_zeros():
  records = np.ones((3, 2), np.float32)
  records[1, 0] = np.nan
  query = dp_query.GaussianSumQuery(10.0, 0.0)
  params = query.derive_sample_params(query.initial_global_state())
  got = vectorized.clipped_sum(query, params, [tf.constant(records)])
  np.testing.assert_array_equal(got[0].numpy(), [2.0, 2.0])


def test_gradients_or_zeros_fills_unconnected_variables():
  variables = [tf.Variable(tf.ones([2, 3])), tf.Variable(tf.ones([4]))]
  with tf.GradientTape() as tape:
    loss = tf.reduce_sum(variables[0] * 2.0)
  grads = vectorized.gradients_or_zeros(tape.gradient(loss, variables),
                                        variables)
  np.testing.assert_array_equal(grads[0].numpy(), np.full([2, 3], 2.0))
  np.testing.assert_array_equal(grads[1].numpy(), np.zeros([4]))
  assert grads[1].dtype == tf.float32
