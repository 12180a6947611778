"""Tests of Poisson-sampled batches."""

import numpy as np
import pytest

from tf_dp.data import poisson_sampled_batches
from tf_dp.data.poisson import default_max_batch_size


def test_sample_sizes_are_binomial_and_padding_has_zero_weight():
  # 400 samples of Binomial(1000, 0.05): mean 50, sd 6.9. The mean of 400
  # sizes has sd 0.34: tolerance 1.5 is > 4 sd; variance within 25%.
  n, q = 1000, 0.05
  x = np.arange(n, dtype=np.float32)[:, None]
  y = np.arange(n, dtype=np.int64)
  sizes = []
  counts = np.zeros(n)
  for xb, yb, w in poisson_sampled_batches(x, y, q, 400, seed=1):
    w = w.numpy()
    size = int(w.sum())
    assert np.all(w[:size] == 1) and np.all(w[size:] == 0)
    chosen = yb.numpy()[:size]
    assert len(set(chosen)) == size  # no example twice in a sample
    np.testing.assert_array_equal(xb.numpy()[:size, 0], chosen)
    counts[chosen] += 1
    sizes.append(size)
  assert np.mean(sizes) == pytest.approx(n * q, abs=1.5)
  assert np.var(sizes) == pytest.approx(n * q * (1 - q), rel=0.25)
  # Every example is included about 400 * q = 20 times.
  assert counts.mean() == pytest.approx(20, abs=0.5)


def test_fixed_shape_and_default_capacity():
  ds = poisson_sampled_batches(np.zeros((100, 3), np.float32),
                               np.zeros(100, np.int64), 0.1, 2, seed=0)
  xb, _, w = next(iter(ds))
  assert xb.shape == (default_max_batch_size(100, 0.1), 3)
  assert w.shape[0] == xb.shape[0]


@pytest.mark.parametrize("batches_per_lot", [1, 3])
def test_batches_have_a_static_size(batches_per_lot):
  # The fast path chooses its per-layer methods from static shapes: with
  # an unknown batch size the tutorial CNN's DP step took 155 ms instead
  # of 32 ms (lots padded to 384 rows).
  ds = poisson_sampled_batches(np.zeros((100, 4, 3), np.float32),
                               np.zeros(100, np.int64), 0.1, 2, seed=0,
                               max_batch_size=30,
                               batches_per_lot=batches_per_lot)
  rows = 30 // batches_per_lot
  x_spec, y_spec, w_spec = ds.element_spec
  assert x_spec.shape.as_list() == [rows, 4, 3]
  assert y_spec.shape.as_list() == w_spec.shape.as_list() == [rows]
  for xb, yb, w in ds:
    assert xb.shape == (rows, 4, 3) and yb.shape == w.shape == (rows,)


def test_sampling_is_unpredictable_by_default():
  a = [w.numpy().sum() for _, _, w in poisson_sampled_batches(
      np.zeros((1000, 1), np.float32), np.zeros(1000), 0.5, 3)]
  b = [w.numpy().sum() for _, _, w in poisson_sampled_batches(
      np.zeros((1000, 1), np.float32), np.zeros(1000), 0.5, 3)]
  assert a != b


def test_invalid_probability():
  with pytest.raises(ValueError, match="sampling_probability"):
    poisson_sampled_batches(np.zeros((10, 1)), np.zeros(10), 0.0, 1)


def test_a_small_probability_is_not_rounded_up():
  """Each example is in a lot with probability at most q, also for a q far
  below 2^-23 (the spacing of float32 uniforms, which would include it with
  probability 2^-23). 2^19 examples, q = 1e-14, 128 lots: some example is
  included with probability at most 2^26 q < 7e-7, while a probability of
  2^-23 would include 8 on average (none with probability e^-8 < 4e-4)."""
  n, q = 2 ** 19, 1e-14
  data = poisson_sampled_batches(np.zeros((n, 1), np.float32),
                                 np.zeros(n, np.int64), q, 128, seed=5)
  assert sum(int(w.numpy().sum()) for _, _, w in data) == 0
