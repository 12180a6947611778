"""Tests of tf_dp.keras.per_example: records, per-record maps and
per-record gradients.

References: slices of the batch by hand, Python loops over records, and
gradients of each record's loss by a GradientTape loop
(``helpers.record_grads``), in float64.
"""

import numpy as np
import pytest
import tensorflow as tf

from tests.keras import helpers
from tf_dp.keras import per_example

KERAS = helpers.keras_modules()


def test_split_into_records_of_a_dense_batch():
  x = tf.reshape(tf.range(24.0), [6, 4])
  one_each = per_example.split_into_records(x, None)
  assert one_each.shape == (6, 1, 4)
  pairs = per_example.split_into_records(x, 3)
  assert pairs.shape == (3, 2, 4)
  np.testing.assert_array_equal(pairs[1], x.numpy()[2:4])
  with pytest.raises(ValueError, match="num_microbatches=4.*batch of 6"):
    per_example.split_into_records(x, 4)


def test_split_into_records_of_a_ragged_batch_keeps_each_example():
  x = tf.ragged.constant([[1, 2, 3], [4], [5, 6], [7, 8, 9, 10]])
  records = per_example.split_into_records(x, 2)
  assert records.to_list() == [[[1, 2, 3], [4]], [[5, 6], [7, 8, 9, 10]]]
  assert per_example.split_into_records(x, None).to_list() == [
      [r] for r in x.to_list()]
  assert int(per_example.batch_size(x)) == 4


def test_map_records_vectorised_and_looped_agree_with_a_python_loop():
  rng = np.random.default_rng(0)
  x = tf.constant(rng.normal(size=(5, 3, 2)), tf.float32)
  fn = lambda r: tf.reduce_sum(r * r, axis=0) + tf.reduce_max(r)
  want = np.stack([fn(x[i]).numpy() for i in range(5)])
  for loop in (False, True):
    np.testing.assert_allclose(per_example.map_records(fn, x, loop=loop),
                               want, rtol=1e-6)


def test_map_records_loops_over_ragged_records_one_at_a_time():
  """Each record is a batch of one that keeps its type: its value depends
  on that example alone (here its length and sum)."""
  x = tf.ragged.constant([[1.0, 2.0, 3.0], [4.0], [5.0, 6.0]])
  records = per_example.split_into_records(x, None)
  fn = lambda r: tf.stack([tf.cast(tf.size(r.flat_values), tf.float32),
                           tf.reduce_sum(r.flat_values)])
  np.testing.assert_allclose(per_example.map_records(fn, records),
                             [[3, 6], [1, 4], [2, 11]])


def test_composite_inputs_reason_names_the_kinds():
  assert per_example.composite_inputs_reason(
      {"a": tf.zeros([2, 3]), "b": tf.zeros([2])}) is None
  reason = per_example.composite_inputs_reason(
      (tf.ragged.constant([[1], [2, 3]]),
       tf.sparse.from_dense(tf.eye(2))))
  assert "RaggedTensor and a SparseTensor" in reason
  assert per_example.is_composite(tf.ragged.constant([[1]]))
  assert not per_example.is_composite(tf.zeros([1]))


def test_user_records_counts_users_and_refuses_a_partial_user():
  assert int(per_example.user_records(tf.zeros([12, 2]), 3)) == 4
  with pytest.raises(ValueError, match="max_examples_per_user=3.*10 rows"):
    per_example.user_records(tf.zeros([10, 2]), 3)


def test_record_loss_is_a_mean_for_examples_and_a_sum_for_users():
  losses = tf.constant([[1.0, 2.0, 6.0], [0.0, 0.0, 3.0]])
  np.testing.assert_allclose(per_example.record_loss(losses, "mean"), [3, 1])
  np.testing.assert_allclose(per_example.record_loss(losses, "sum"), [9, 3])


def _weighted_ce(y_true, y_pred, sample_weight):
  losses = tf.keras.backend.sparse_categorical_crossentropy(
      y_true, y_pred, from_logits=True)
  return tf.reshape(losses, [-1]) * tf.reshape(sample_weight, [-1])


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("microbatches", [None, 4])
def test_record_gradients_match_a_loop_over_records(K, microbatches):
  model = helpers.build_model(K, "dense")
  x, y = helpers.make_data("dense", 8)
  grads, y_pred, losses, _ = per_example.record_gradients(
      model, _weighted_ce, tf.constant(x), tf.constant(y), None,
      microbatches)
  per_record = 1 if microbatches is None else 8 // microbatches
  want = list(helpers.record_grads(model, x, y, per_record))
  assert len(want) == 8 // per_record
  for v, got in enumerate(grads):
    assert got.shape[0] == len(want)
    for r, ref in enumerate(want):
      np.testing.assert_allclose(got[r], ref[v], rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(y_pred, model(x), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(losses, _weighted_ce(y, model(x), np.ones(8, np.float32)),
                             rtol=1e-5)


@pytest.mark.parametrize("K", KERAS)
def test_user_records_sum_their_weighted_examples_gradients(K):
  """A user's gradient is the sum over the user's rows of weight times the
  example gradient (padding rows of weight 0 add nothing)."""
  model = helpers.build_model(K, "dense")
  x, y = helpers.make_data("dense", 6)
  w = np.array([1.0, 2.0, 0.0, 0.5, 1.0, 0.0], np.float32)
  grads = per_example.record_gradients(
      model, _weighted_ce, tf.constant(x), tf.constant(y), tf.constant(w),
      num_microbatches=2, record_reduction="sum").grads
  examples = list(helpers.record_grads(model, x, y, 1))
  for user in range(2):
    for v, got in enumerate(grads):
      want = sum(w[i] * examples[i][v] for i in range(3 * user, 3 * user + 3))
      np.testing.assert_allclose(got[user], want, rtol=1e-4, atol=1e-6)
