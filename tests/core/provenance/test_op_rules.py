"""Labels of small traced computations (``tf_dp.core.provenance``).

Each case traces a function of a batch ``x`` (rows by example) and checks
the label the analysis gives its result against what the computation does:
rows by example where each example's entries read that example alone,
``Mixed`` (proven where the op certainly combines examples) elsewhere.
``test_labels_agree_with_the_jacobian`` checks the claims against the
jacobian of every case: an output labelled rows by example never depends
on another example's input.
"""

import numpy as np
import pytest
import tensorflow as tf

from tf_dp.core.provenance import walker
from tf_dp.core.provenance.labels import Interleaved
from tf_dp.core.provenance.labels import Mixed
from tf_dp.core.provenance.labels import Monomial
from tf_dp.core.provenance.labels import PUBLIC
from tf_dp.core.provenance.labels import Rows

W = tf.constant(np.arange(12, dtype="float32").reshape(4, 3) / 10)
N = 5


def _label(fn, shape=(4,), dtype=tf.float32, batch=None):
  """The label of ``fn(x)`` for a batch ``x`` of ``[batch, *shape]``."""
  spec = tf.TensorSpec((batch,) + tuple(shape), dtype)
  found = {}

  def traced(x):
    graph = tf.compat.v1.get_default_graph()
    start = len(graph.get_operations())
    out = fn(x)
    analysis = walker.Analysis([(x, Rows(0))])
    analysis.walk(graph.get_operations()[start:], forward=True)
    found["label"] = analysis.label(out)
    found["writes"] = analysis.writes
    return out

  tf.function(traced, autograph=False).get_concrete_function(spec)
  return found["label"]


def _mixed(label, proven):
  return isinstance(label, Mixed) and label.proven == proven


def _gradient_of(fn):
  """x -> d(sum(fn(x) * c))/dx for a fixed random c: the backward pass."""
  def grad(x):
    with tf.GradientTape() as tape:
      tape.watch(x)
      y = fn(x)
      c = tf.random.stateless_normal(tf.shape(y), [1, 2])
      total = tf.reduce_sum(y * c)
    return tape.gradient(total, x)
  return grad


def _custom_mixing_backward(x):
  @tf.custom_gradient
  def identity(t):
    return tf.identity(t), lambda dy: dy + tf.reduce_mean(dy, 0)
  return identity(x)


def _loop_over_positions(x):
  """A cumulative sum over positions written as a while loop."""
  steps = tf.shape(x)[1]
  acc = tf.zeros_like(x[:, 0])
  out = tf.TensorArray(tf.float32, size=steps)

  def body(i, acc, out):
    acc = acc + x[:, i]
    return i + 1, acc, out.write(i, acc)

  _, _, out = tf.while_loop(lambda i, *_: i < steps, body, (0, acc, out))
  return tf.transpose(out.stack(), [1, 0, 2])


# (name, fn, input shape, dtype, expected): expected is a label, or
# "mixed" for a Mixed one, "proven" for a proven Mixed one.
CASES = [
    ("bias", lambda x: x + tf.constant([1.0, 2, 3, 4]), (4,), tf.float32,
     Rows(0)),
    ("dense", lambda x: tf.nn.relu(tf.matmul(x, W)), (4,), tf.float32,
     Rows(0)),
    ("mean_over_features", lambda x: tf.reduce_mean(x, 1), (4,), tf.float32,
     Rows(0)),
    ("batch_mean", lambda x: x - tf.reduce_mean(x, 0), (4,), tf.float32,
     "proven"),
    ("batch_softmax", lambda x: tf.nn.softmax(x[:, 0]), (4,), tf.float32,
     "proven"),
    ("gram_over_batch", lambda x: tf.matmul(x, x, transpose_a=True), (4,),
     tf.float32, "proven"),
    ("einsum_per_example", lambda x: tf.einsum("bij,bkj->bik", x, x),
     (3, 4), tf.float32, Rows(0)),
    ("einsum_across_examples", lambda x: tf.einsum("bi,ci->bc", x, x),
     (4,), tf.float32, "proven"),
    ("flatten_positions", lambda x: tf.reshape(x, [-1, 4]), (3, 4),
     tf.float32, Rows(0, Monomial(3))),
    ("flatten_and_back", lambda x: tf.reshape(
        tf.matmul(tf.reshape(x, [-1, 4]), W), tf.concat(
            [tf.shape(x)[:2], [3]], 0)), (3, 4), tf.float32, Rows(0)),
    ("rows_across_examples", lambda x: tf.reshape(x, [-1, 4]), (6,),
     tf.float32, "mixed"),
    ("time_major", lambda x: tf.transpose(x, [1, 0, 2]), (3, 4), tf.float32,
     Rows(1)),
    ("time_major_rows", lambda x: tf.reshape(tf.transpose(x, [1, 0, 2]),
                                             [-1, 4]), (3, 4), tf.float32,
     Interleaved(0, Monomial(3))),
    ("time_major_and_back", lambda x: tf.transpose(tf.transpose(
        x, [1, 0, 2]), [1, 0, 2]), (3, 4), tf.float32, Rows(0)),
    ("lookup", lambda x: tf.gather(W, x), (3,), tf.int32, Rows(0)),
    ("reorder_examples", lambda x: tf.gather(x, [1, 0, 2, 4, 3]), (4,),
     tf.float32, "mixed"),
    ("first_example_everywhere", lambda x: x - x[0], (4,), tf.float32,
     "mixed"),
    ("concat_features", lambda x: tf.concat([x, 2 * x], 1), (4,),
     tf.float32, Rows(0)),
    ("concat_examples", lambda x: tf.concat([x, x], 0), (4,), tf.float32,
     "mixed"),
    ("slice_features", lambda x: x[:, 1:3], (4,), tf.float32, Rows(0)),
    ("public_branch", lambda x: tf.cond(tf.constant(True), lambda: x * 2,
                                        lambda: x + 1), (4,), tf.float32,
     Rows(0)),
    ("data_branch", lambda x: tf.cond(tf.reduce_sum(x) > 0, lambda: x * 2,
                                      lambda: x + 1), (4,), tf.float32,
     "proven"),
    ("loop_over_positions", _loop_over_positions, (3, 4), tf.float32,
     Rows(0)),
    ("dilated_conv", lambda x: tf.nn.conv2d(
        x, tf.ones([2, 2, 1, 1]), 1, "SAME", dilations=2), (6, 6, 1),
     tf.float32, Rows(0)),
    ("count_over_the_batch", lambda x: tf.cast(tf.math.bincount(
        tf.cast(x, tf.int32), minlength=4, maxlength=4), tf.float32)[None] *
     tf.ones_like(x), (4,), tf.float32, "proven"),
    ("unknown_op", lambda x: tf.cast(tf.math.bincount(
        tf.cast(x, tf.int32), minlength=4, maxlength=4, binary_output=True,
        axis=-1), tf.float32) * tf.linalg.det(tf.eye(4) + x[:, :1, None]),
     (4,), tf.float32, "mixed"),
    # CategoryEncoding: the output size is min(maxlength, max(minlength,
    # largest token + 1)), the largest over the whole batch; equal bounds
    # make it a constant.
    ("bincount_per_example", lambda x: tf.cast(tf.math.bincount(
        x, minlength=5, maxlength=5, axis=-1), tf.float32), (3,), tf.int32,
     Rows(0)),
    ("bincount_size_from_the_batch", lambda x: tf.cast(tf.math.bincount(
        x, minlength=2, maxlength=5, axis=-1), tf.float32), (3,), tf.int32,
     "proven"),
    ("backward_of_dense", _gradient_of(lambda x: tf.tanh(tf.matmul(x, W))),
     (4,), tf.float32, Rows(0)),
    # Through rows that interleave the examples, and back.
    ("backward_of_time_major_dense", _gradient_of(
        lambda x: tf.tanh(tf.transpose(tf.tensordot(tf.transpose(
            x, [1, 0, 2]), W, 1), [1, 0, 2]))), (3, 4), tf.float32, Rows(0)),
    ("backward_mixing", _gradient_of(
        lambda x: tf.square(_custom_mixing_backward(x))), (4,), tf.float32,
     "mixed"),
    ("shape_only", lambda x: tf.cast(tf.shape(x), tf.float32), (4,),
     tf.float32, PUBLIC),
]


@pytest.mark.parametrize("name,fn,shape,dtype,expected", CASES,
                         ids=[c[0] for c in CASES])
def test_label(name, fn, shape, dtype, expected):
  del name
  label = _label(fn, shape, dtype)
  if expected in ("proven", "mixed"):
    assert isinstance(label, Mixed), label
    if expected == "proven":
      assert label.proven, label
  else:
    assert label == expected


def _inputs(shape, dtype, seed):
  rng = np.random.default_rng(seed)
  if dtype == tf.int32:
    return tf.constant(rng.integers(0, 4, (N,) + shape), tf.int32)
  return tf.constant(rng.normal(size=(N,) + shape), tf.float32)


@pytest.mark.parametrize("name,fn,shape,dtype,expected",
                         [c for c in CASES if c[3] == tf.float32
                          and isinstance(c[4], Rows)],
                         ids=[c[0] for c in CASES if c[3] == tf.float32
                              and isinstance(c[4], Rows)])
def test_labels_agree_with_the_jacobian(name, fn, shape, dtype, expected):
  """Where the label says rows by example on ``axis``, the jacobian of the
  result with respect to the batch is zero between different examples."""
  del name
  x = _inputs(shape, dtype, 0)
  with tf.GradientTape() as tape:
    tape.watch(x)
    y = fn(x)
  jac = tape.jacobian(y, x).numpy()
  y_rank = len(y.shape)
  rows = y.shape[expected.axis]
  per_example = rows // N
  moved = np.moveaxis(jac, expected.axis, 0)  # [rows, ..., N, ...]
  for row in range(rows):
    owner = row // per_example
    others = np.delete(np.moveaxis(moved[row], y_rank - 1, 0), owner, 0)
    assert np.all(others == 0), (row, owner)


def test_interleaved_rows_come_back_in_order():
  label = _label(lambda x: tf.space_to_batch(x, [2, 2], [[0, 0], [0, 0]]),
                 (4, 4, 1))
  assert label == Interleaved(0, Monomial(4))


def test_a_data_dependent_write_is_listed():
  v = tf.Variable(tf.zeros([4]))
  found = {}

  def traced(x):
    graph = tf.compat.v1.get_default_graph()
    start = len(graph.get_operations())
    v.assign(tf.reduce_mean(x, 0))
    v.assign_add(tf.ones([4]))  # Public: not a write of data.
    analysis = walker.Analysis([(x, Rows(0))])
    analysis.walk(graph.get_operations()[start:], forward=True)
    found["writes"] = [op.type for op in analysis.writes]
    return x

  tf.function(traced, autograph=False).get_concrete_function(
      tf.TensorSpec([None, 4]))
  assert found["writes"] == ["AssignVariableOp"]
