"""Tests of tf_dp.data.lots: how a dataset says its lots were drawn (the
samplers' marks and ``tf_dp.data.declare_sampling``), the padding rows of
drawn lots, and class weights folded into a marked dataset's weights."""

import numpy as np
import pytest
import tensorflow as tf

from tf_dp.data import declare_sampling
from tf_dp.data import DeclaredSampling
from tf_dp.data import fixed_size_sampled_batches
from tf_dp.data import poisson_sampled_batches
from tf_dp.data import lots

X = np.arange(40, dtype=np.float32)[:, None]
Y = np.arange(40, dtype=np.int64)


def test_the_samplers_mark_their_datasets_with_what_they_draw():
  poisson = poisson_sampled_batches(X, Y, 0.25, 3, seed=1, batches_per_lot=2)
  fixed = fixed_size_sampled_batches(X, Y, 5, 3, seed=1, batches_per_lot=4)
  assert lots.declared_sampling(poisson) == DeclaredSampling(
      "poisson", 0.25, 40, 2, seed=1)
  assert lots.declared_sampling(fixed) == DeclaredSampling(
      "fixed_size", None, 40, 4, seed=1)
  assert lots.declared_sampling(
      poisson_sampled_batches(X, Y, 0.25, 3)).seed is None


def test_poisson_padding_rows_hold_no_example():
  """Padding rows are zeros of weight 0, never copies of an example (a sum
  that ignores the weights would otherwise count that example again)."""
  x = np.arange(1, 41, dtype=np.float32)[:, None] * np.ones((1, 3), np.float32)
  y = np.arange(1, 41, dtype=np.int64)
  names = np.array([b"e%d" % i for i in range(1, 41)])
  padded = 0
  for (features, labels), weights in (
      ((f, l), w) for f, l, w in poisson_sampled_batches(
          (x, names), y, 0.1, 20, max_batch_size=12, seed=2)):
    present = weights.numpy() > 0
    xs, ids, ys = features[0].numpy(), features[1].numpy(), labels.numpy()
    assert np.all(xs[~present] == 0) and np.all(ys[~present] == 0)
    assert np.all(ids[~present] == b"")
    assert np.all(xs[present, 0] == ys[present])  # real rows are examples
    padded += int((~present).sum())
  assert padded > 0


def test_a_derived_dataset_carries_no_mark():
  poisson = poisson_sampled_batches(X, Y, 0.25, 3, seed=1)
  for derived in (poisson.prefetch(1), poisson.map(lambda *b: b),
                  poisson.repeat(2), poisson.take(1)):
    assert lots.declared_sampling(derived) is None
  assert lots.declared_sampling(tf.data.Dataset.range(3)) is None


def test_declare_sampling_marks_the_dataset_in_place():
  own = tf.data.Dataset.from_tensor_slices((X, Y)).batch(8)
  assert declare_sampling(own, "poisson", 0.2, population_size=40,
                          batches_per_lot=5) is own
  assert lots.declared_sampling(own) == DeclaredSampling("poisson", 0.2, 40,
                                                         5)
  declare_sampling(own, "poisson", 0.2, population_size=40,
                   batches_per_lot=5)  # the same declaration again: fine
  with pytest.raises(ValueError, match="already marked"):
    declare_sampling(own, "fixed_size")
  assert lots.declared_sampling(own).sampling == "poisson"
  # The mark changes nothing about the data.
  np.testing.assert_array_equal(
      np.concatenate([b[1].numpy() for b in own]), Y)


def test_a_samplers_mark_cannot_be_declared_otherwise():
  """Lots drawn with q = 0.5 must never be recorded as q = 0.01."""
  drawn = poisson_sampled_batches(X, Y, 0.5, 4)
  with pytest.raises(ValueError, match="already marked"):
    declare_sampling(drawn, "poisson", 0.01, population_size=40)
  assert lots.declared_sampling(drawn).sampling_probability == 0.5


@pytest.mark.parametrize("kwargs, error, names", [
    (dict(dataset=[1, 2], sampling="poisson", sampling_probability=0.1),
     TypeError, "dataset"),
    (dict(sampling="shuffled"), ValueError, 'sampling="shuffled"'),
    (dict(sampling="without_replacement"), ValueError, "sampling"),
    (dict(sampling="poisson"), ValueError, "sampling_probability"),
    (dict(sampling="poisson", sampling_probability=0.0), ValueError,
     "sampling_probability"),
    (dict(sampling="poisson", sampling_probability=1.5), ValueError,
     "sampling_probability"),
    (dict(sampling="fixed_size", sampling_probability=0.1), ValueError,
     "sampling_probability"),
    (dict(sampling="fixed_size", population_size=0), ValueError,
     "population_size"),
    (dict(sampling="fixed_size", batches_per_lot=0), ValueError,
     "batches_per_lot"),
])
def test_bad_declarations_name_the_argument(kwargs, error, names):
  kwargs.setdefault("dataset", tf.data.Dataset.range(4).batch(2))
  with pytest.raises(error, match=names):
    declare_sampling(**kwargs)
  assert lots.declared_sampling(kwargs["dataset"]) is None


def _weighted_lots(y, weight):
  x = np.arange(len(y), dtype=np.float32)[:, None]
  data = tf.data.Dataset.from_tensor_slices(
      (x, y, np.asarray(weight, np.float32))).batch(4)
  return declare_sampling(data, "poisson", 0.5, population_size=len(y))


@pytest.mark.parametrize("shape", ["sparse", "column", "one_hot"])
def test_with_class_weights_multiplies_each_row_by_its_labels_weight(shape):
  """Keras semantics: a class without a weight counts 1, padding (weight 0)
  stays 0, and the mark of the lots is kept."""
  labels = np.array([0, 1, 2, 1, 0, 2, 2, 0])
  weight = np.array([1.0, 1.0, 0.0, 0.5, 1.0, 1.0, 1.0, 0.0])
  y = {"sparse": labels, "column": labels[:, None],
       "one_hot": np.eye(3, dtype=np.float32)[labels]}[shape]
  data = _weighted_lots(y, weight)
  out = lots.with_class_weights(data, {0: 3.0, 1: 0.25})
  got = np.concatenate([w.numpy() for _, _, w in out])
  want = [w * {0: 3.0, 1: 0.25}.get(c, 1.0) for c, w in zip(labels, weight)]
  np.testing.assert_allclose(got, want, rtol=1e-7)
  assert lots.declared_sampling(out) == lots.declared_sampling(data)


def test_with_class_weights_refuses_what_it_cannot_weight():
  unmarked = tf.data.Dataset.from_tensor_slices((X, Y, Y * 0.0)).batch(4)
  with pytest.raises(ValueError, match="needs a marked dataset"):
    lots.with_class_weights(unmarked, {0: 2.0})
  two_outputs = declare_sampling(tf.data.Dataset.from_tensor_slices(
      (X, (Y, Y), Y * 0.0)).batch(4), "fixed_size")
  with pytest.raises(ValueError, match="one label tensor"):
    lots.with_class_weights(two_outputs, {0: 2.0})
  with pytest.raises(ValueError, match="class_weight must hold weights >= 0"):
    lots.with_class_weights(_weighted_lots(Y, Y * 0.0), {0: -1.0})


def test_a_lots_draws_are_distinct():
  """The draws a sampler ranks (fixed-size lots take the top k, user lots
  order each user's examples by them) hold no two equal values: a tie
  would be broken by position, favouring low indices, and the subset would
  not be uniform. 2^18 draws of 64 bits tie with probability n^2 / 2^65 <
  2e-9 (float32 uniforms, 2^23 values, tie about 4000 times)."""
  n = 2 ** 18
  rows = np.arange(n, dtype=np.int64)

  def choose(draws):
    # The lot is the one row whose index is the number of distinct draws
    # less one: n - 1 exactly when no two draws are equal.
    distinct = tf.size(tf.unique(draws).y)
    return tf.cast(distinct - 1, tf.int64)[None], None

  data = lots.lot_dataset(rows[:, None], rows, 3, seed=4, batches_per_lot=1,
                          choose=choose, stream=1, sampling="fixed_size")
  assert [int(y.numpy()[0]) for _, y in data] == [n - 1] * 3


@pytest.mark.parametrize("q", [1.0, 0.5, 0.3, 1e-8, 2.0 ** -70])
def test_included_takes_floor_q_2_64_of_the_words(q):
  """The words below the threshold are exactly the first floor(q 2^64) of
  the 2^64 (from -2^63 up): the probability of inclusion is in
  (q - 2^-64, q], never above the q the ledger records."""
  from fractions import Fraction  # pylint: disable=g-import-not-at-top
  count = int(Fraction(q) * 2 ** 64)
  assert count <= Fraction(q) * 2 ** 64 < count + 1
  lowest, highest = -2 ** 63, 2 ** 63 - 1
  words = [lowest, highest, lowest + count - 1, lowest + count]
  words = [w for w in words if lowest <= w <= highest]
  got = lots.included(tf.constant(words, tf.int64), q).numpy().tolist()
  assert got == [w < lowest + count for w in words]
  assert got[0] == (count > 0) and got[1] == (q == 1.0)
