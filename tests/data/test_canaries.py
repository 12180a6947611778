"""Canaries and their mixing into the training data: each canary is in with
probability 1/2, the data holds the included ones and no trace of the
others, and the population size counts them."""

import numpy as np
import pytest
from scipy import stats
import tensorflow as tf

import tf_dp
from tf_dp.data import canaries as canaries_lib


def pool(n=300, seed=0):
  rng = np.random.default_rng(seed)
  return (rng.uniform(0, 1, (n, 4, 4)).astype(np.float32),
          rng.integers(0, 5, n).astype(np.int32))


def test_inclusion_bits_are_fair_coins():
  bits = tf_dp.data.dirac_canaries(20000, seed=3).included
  # Binomial(20000, 1/2): 4 standard deviations are 283.
  assert abs(int(bits.sum()) - 10000) < 283
  # Independent of their neighbours: pairs (in, in) a quarter of the time.
  pairs = np.mean(bits[:-1] & bits[1:])
  assert abs(pairs - 0.25) < 4 * np.sqrt(0.25 * 0.75 / 19999)
  # A seed reproduces them; without one, fresh entropy.
  np.testing.assert_array_equal(
      bits, tf_dp.data.dirac_canaries(20000, seed=3).included)
  assert not np.array_equal(bits, tf_dp.data.dirac_canaries(20000).included)


def test_mislabeled_canaries_are_pool_examples_with_a_wrong_label():
  x, y = pool()
  canaries = tf_dp.data.mislabeled_canaries(x, y, 250, seed=1)
  assert canaries.kind == "mislabeled" and canaries.num_canaries == 250
  # Each is one of the pool's inputs, with another label than its own.
  index = [int(np.flatnonzero((x == row).all(axis=(1, 2)))[0])
           for row in canaries.x]
  assert len(set(index)) == 250
  assert np.all(canaries.y != y[index])
  assert canaries.y.dtype == y.dtype
  # The wrong label is uniform over the 4 other classes: chi-square test of
  # the shifts (p = 0.087 measured; refused below 1e-3).
  shifts = (canaries.y - y[index]) % 5
  assert stats.chisquare(np.bincount(shifts, minlength=5)[1:]).pvalue > 1e-3


def test_out_of_distribution_canaries_are_noise_in_the_data_range():
  x, _ = pool()
  canaries = tf_dp.data.out_of_distribution_canaries(
      (x * 255).astype(np.uint8), 100, num_classes=10, seed=2)
  assert canaries.x.shape == (100, 4, 4) and canaries.x.dtype == np.uint8
  assert canaries.x.min() >= 0 and canaries.x.max() <= 255
  assert canaries.x.std() > 60  # Uniform on [0, 255]: sd 73.6.
  assert set(canaries.y) <= set(range(10))


def test_mixed_arrays_hold_the_included_canaries_only():
  x, y = pool()
  canaries = tf_dp.data.mislabeled_canaries(*pool(50, seed=9), 40, seed=4)
  mixed = tf_dp.data.mix_canaries(x, y, canaries)
  k = canaries.num_included
  assert 0 < k < 40
  assert mixed.population_size == 300 + k
  np.testing.assert_array_equal(mixed.x[:300], x)
  np.testing.assert_array_equal(mixed.x[300:], canaries.x[canaries.included])
  np.testing.assert_array_equal(mixed.y[300:], canaries.y[canaries.included])
  assert mixed.x.dtype == x.dtype and mixed.y.dtype == y.dtype
  # No excluded canary anywhere in the data.
  for row in canaries.x[~canaries.included]:
    assert not (mixed.x == row).all(axis=(1, 2)).any()
  # Labels of shape [n, 1] keep their shape.
  column = tf_dp.data.mix_canaries(x, y[:, None], canaries)
  assert column.y.shape == (300 + k, 1)


def test_mixed_dirac_canaries_are_zero_rows_with_their_ids():
  x, y = pool()
  canaries = tf_dp.data.dirac_canaries(30, seed=5)
  mixed = tf_dp.data.mix_canaries(x, y, canaries)
  inputs, ids = mixed.x
  k = canaries.num_included
  assert mixed.population_size == 300 + k
  np.testing.assert_array_equal(ids[:300], 0)
  np.testing.assert_array_equal(ids[300:],
                                np.flatnonzero(canaries.included) + 1)
  assert ids.dtype == np.int32
  np.testing.assert_array_equal(inputs[300:], 0)
  np.testing.assert_array_equal(mixed.y[300:], 0)


def test_each_canary_is_a_user_of_its_own():
  x, y = pool()
  canaries = tf_dp.data.dirac_canaries(30, seed=5)
  k = canaries.num_included
  numbers = np.arange(300) // 3  # 100 users of 3 examples.
  mixed = tf_dp.data.mix_canaries(x, y, canaries, user_ids=numbers)
  assert mixed.population_size == 100 + k
  np.testing.assert_array_equal(mixed.user_ids[300:], np.arange(100, 100 + k))
  names = np.array([f"u{i}" for i in numbers])
  named = tf_dp.data.mix_canaries(x, y, canaries, user_ids=names)
  assert named.population_size == 100 + k
  assert len(set(named.user_ids[300:]) - set(names)) == k


def test_mixed_dataset_appends_the_canaries():
  x, y = pool(20)
  canaries = tf_dp.data.mislabeled_canaries(*pool(50, seed=9), 10, seed=6)
  k = canaries.num_included
  dataset = tf.data.Dataset.from_tensor_slices((x, y))
  mixed = tf_dp.data.mix_canaries_into_dataset(dataset, canaries)
  assert mixed.population_size == 20 + k
  rows = list(mixed.x.as_numpy_iterator())
  assert len(rows) == 20 + k
  np.testing.assert_array_equal(np.stack([r[0] for r in rows[20:]]),
                                canaries.x[canaries.included])
  # Dirac: ((x, canary_id), y) elements.
  dirac = tf_dp.data.dirac_canaries(10, seed=7)
  mixed = tf_dp.data.mix_canaries_into_dataset(dataset, dirac)
  ids = [int(r[0][1]) for r in mixed.x.as_numpy_iterator()]
  assert ids == [0] * 20 + list(np.flatnonzero(dirac.included) + 1)
  # An unknown length must be given.
  unknown = dataset.filter(lambda *_: True)
  with pytest.raises(ValueError, match="num_examples=<n>"):
    tf_dp.data.mix_canaries_into_dataset(unknown, dirac)
  assert tf_dp.data.mix_canaries_into_dataset(
      unknown, dirac, num_examples=20).population_size == 20 + (
          dirac.num_included)


def test_repr_keeps_the_bits_secret():
  canaries = tf_dp.data.dirac_canaries(10, seed=0)
  assert repr(canaries) == ("Canaries(kind='dirac', num_canaries=10, "
                            "num_included=<secret>)")


@pytest.mark.parametrize("call,match", [
    (lambda: tf_dp.data.mislabeled_canaries(*pool(5), 6), "at most the pool"),
    (lambda: tf_dp.data.mislabeled_canaries(pool()[0], np.ones(300), 6),
     "y must be integer class indices"),
    (lambda: tf_dp.data.mislabeled_canaries(*pool(), 6, num_classes=1),
     "num_classes must be at least 2"),
    (lambda: tf_dp.data.dirac_canaries(0), "num_canaries must be"),
    (lambda: tf_dp.data.dirac_canaries(5, gradient_norm=0.0),
     "gradient_norm must be"),
    (lambda: tf_dp.data.mix_canaries(*pool(), "canaries"),
     "canaries must be tf_dp.data.Canaries"),
    (lambda: tf_dp.data.mix_canaries(
        pool()[0][:, :2], pool()[1],
        tf_dp.data.mislabeled_canaries(*pool(), 5)),
     r"canaries' inputs have shape \(4, 4\) but the data's \(2, 4\)"),
    (lambda: tf_dp.data.mix_canaries(pool()[0], pool()[1][:5],
                                     tf_dp.data.dirac_canaries(5)),
     "of one length"),
    (lambda: tf_dp.data.mix_canaries(*pool(), tf_dp.data.dirac_canaries(5),
                                     user_ids=[1, 2]),
     "one id per example"),
])
def test_bad_input_is_refused_naming_the_argument(call, match):
  with pytest.raises((ValueError, TypeError), match=match):
    call()


def test_canary_kinds_are_one_definition():
  assert canaries_lib.INPUT_SPACE_KINDS == ("mislabeled",
                                            "out_of_distribution")
  assert str(canaries_lib.CanaryKind.DIRAC) == "dirac"
