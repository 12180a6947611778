"""Tests of tf_dp.estimator.record_independence in tf.compat.v1 graphs:
which tensors are the batch's data, and the assertion that fails when one
example's loss reads another example (and only then).

The optimizers' use of the check (a mixing loss refused before any
variable or ledger changes, ``self_check=False``) is tested with them in
tests/estimator/test_dp_optimizer_v1.py.
"""

import numpy as np
import pytest
import tensorflow as tf

from tf_dp.estimator import record_independence
from tests.estimator.test_dp_optimizer_v1 import _batch_centred

v1 = tf.compat.v1
X = np.random.default_rng(0).normal(size=(8, 3)).astype(np.float32)
IDS = np.array([0, 3, 1, 4, 2, 2, 0, 1], np.int32)


def _run_check(build_loss, seeds=range(4)):
  """Runs the assertion for several random halves; returns the error
  message of the first that fails, else None."""
  for seed in seeds:
    with tf.Graph().as_default():
      features = v1.placeholder(tf.float32, [8, 3])
      ids = v1.placeholder(tf.int32, [8])
      w = tf.Variable(np.ones(3, np.float32))
      emb = tf.Variable(np.arange(15, dtype=np.float32).reshape(5, 3) / 10)
      check = record_independence.independence_assertion(
          build_loss(features, ids, w, emb), seed=seed)
      with v1.Session() as sess:
        sess.run(v1.global_variables_initializer())
        try:
          sess.run(check, {features: X, ids: IDS})
        except tf.errors.InvalidArgumentError as e:
          return e.message
  return None


def _independent(features, ids, w, emb):
  h = features * tf.gather(emb, ids)
  return tf.square(tf.linalg.matvec(h, w) - 1.0)


def _centred_embeddings(features, ids, w, emb):
  del features
  h = tf.gather(emb, ids)
  h = h / tf.reduce_sum(h)
  return tf.square(tf.linalg.matvec(h, w) - 1.0)


def test_data_tensors_are_the_features_and_the_embeddings_of_ids():
  with tf.Graph().as_default():
    features = v1.placeholder(tf.float32, [8, 3])
    ids = v1.placeholder(tf.int32, [8])
    emb = tf.Variable(tf.ones([5, 3]))
    looked_up = tf.gather(emb, ids)
    loss = tf.reduce_sum(2.0 * features + looked_up, axis=1)
    found = record_independence.data_tensors(loss)
    assert {t.ref() for t in found} == {features.ref(), looked_up.ref()}


def test_a_batch_written_into_the_graph_is_its_constants():
  with tf.Graph().as_default():
    batch = tf.constant(X)
    loss = tf.reduce_sum(batch * tf.Variable(tf.ones([3])), axis=1)
    assert [t.ref() for t in record_independence.data_tensors(loss)] == [
        batch.ref()]


def test_independent_examples_pass():
  assert _run_check(_independent) is None


@pytest.mark.parametrize("build_loss", [_batch_centred,
                                       _centred_embeddings])
def test_a_loss_that_reads_other_examples_fails_with_the_fix(build_loss):
  message = _run_check(build_loss)
  assert message is not None
  assert "depends on other examples of the batch" in message
  assert "GroupNormalization or LayerNormalization" in message


def test_no_data_tensor_means_no_check():
  with tf.Graph().as_default():
    w = tf.Variable(tf.ones([8]))
    op = record_independence.independence_assertion(tf.square(w))
    assert op.type == "NoOp"


def _failed_runs(build_loss, x, runs, seed=None):
  """How many of ``runs`` runs of one assertion (a fresh random half and
  direction each run) on the features ``x`` fail."""
  with tf.Graph().as_default():
    features = v1.placeholder(tf.float32, x.shape)
    w = tf.Variable(np.ones(x.shape[1], np.float32))
    check = record_independence.independence_assertion(
        build_loss(features, None, w, None), seed=seed)
    failed = 0
    with v1.Session() as sess:
      sess.run(v1.global_variables_initializer())
      for _ in range(runs):
        try:
          sess.run(check, {features: x})
        except tf.errors.InvalidArgumentError:
          failed += 1
  return failed


@pytest.mark.parametrize("rows", [2, 3, 8])
def test_every_run_of_the_check_splits_the_batch(rows):
  """A batch-centred loss fails every run of the check, not only most: the
  random half is neither empty nor the whole batch (independent coin flips
  would let a run of a batch of 2 pass with probability 1/2, so all 40 runs
  failing would have probability 2^-40)."""
  x = np.random.default_rng(1).normal(size=(rows, 3)).astype(np.float32)
  assert _failed_runs(_batch_centred, x, 40) == 40


def _reads_the_next_example(features, ids, w, emb):
  """Example 0's loss reads example 1; no other loss reads another."""
  del ids, emb
  h = tf.concat([features[:1] + features[1:2], features[1:]], 0)
  return tf.square(tf.linalg.matvec(h, w) - 1.0)


def test_one_example_reading_one_other_fails_a_quarter_of_the_runs():
  """The rate the module docstring states: example 0 reading example 1 is
  caught when 1 is in S and 0 is not, 4 * 4 / (8 * 7) = 2/7 of the runs
  for b = 8. 400 runs: sd sqrt(2/7 * 5/7 / 400) = 0.023; 6 sd either side
  is [0.15, 0.42], which excludes a check that never fails and one that
  always does."""
  failed = _failed_runs(_reads_the_next_example, X, 400, seed=3)
  assert 0.15 <= failed / 400 <= 0.42
