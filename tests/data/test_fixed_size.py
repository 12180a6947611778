"""Tests of fixed-size sampled lots (independent uniform subsets)."""

import numpy as np
import pytest

from tf_dp.data import fixed_size_sampled_batches


def test_lots_are_uniform_subsets_of_distinct_examples():
  # 600 lots of 10 out of n = 40, split into 2 batches of 5: distinct
  # examples per lot, each example in 600 * 10 / 40 = 150 lots on average
  # (sd ~ 10.6 per example; the max deviation over 40 stays under 5 sd).
  n = 40
  x = np.arange(n, dtype=np.float32)[:, None]
  y = np.arange(n, dtype=np.int64)
  batches = list(fixed_size_sampled_batches(x, y, 5, 600, seed=3,
                                            batches_per_lot=2))
  assert len(batches) == 1200 and all(b[1].shape[0] == 5 for b in batches)
  counts = np.zeros(n)
  for lot in range(600):
    chosen = np.concatenate([b[1].numpy() for b in batches[2 * lot:2 * lot + 2]])
    np.testing.assert_array_equal(x[chosen, 0], np.concatenate(
        [b[0].numpy()[:, 0] for b in batches[2 * lot:2 * lot + 2]]))
    assert len(set(chosen.tolist())) == 10
    counts[chosen] += 1
  assert np.abs(counts - 150).max() < 5 * 10.6


def test_re_iteration_draws_fresh_lots_and_bad_sizes_are_refused():
  x = np.arange(30, dtype=np.float32)[:, None]
  y = np.arange(30)
  data = fixed_size_sampled_batches(x, y, 6, 4, seed=1)
  assert [b[1].numpy().tolist() for b in data] != [
      b[1].numpy().tolist() for b in data]
  with pytest.raises(ValueError, match="batch_size"):
    fixed_size_sampled_batches(x, y, 31, 4)
