"""Lots drawn over users (tf_dp.data.users): each user in k consecutive
rows, at most k of their examples, users drawn as the mark declares."""

import numpy as np
import pytest

import tf_dp
from tf_dp.data.lots import declared_sampling
from tf_dp.data import fixed_size_sampled_users
from tf_dp.data import poisson_sampled_users

# 40 users, user u holding 1 + u % 7 examples (1..7), shuffled order.
COUNTS = np.array([1 + u % 7 for u in range(40)])
USER_IDS = np.random.default_rng(0).permutation(np.repeat(
    np.array([f"user{u}" for u in range(40)]), COUNTS))
X = np.arange(len(USER_IDS), dtype=np.float32)[:, None]
Y = np.arange(len(USER_IDS), dtype=np.int64)


def blocks(dataset, k):
  """Yields each lot's users as lists of example indices (one per block),
  after checking the layout: a user's examples first in its block, then
  padding rows of weight 0 holding zeros."""
  for xb, yb, w in dataset:
    x, y, w = xb.numpy()[:, 0], yb.numpy(), w.numpy()
    assert len(w) % k == 0
    lot = []
    for b in range(len(w) // k):
      rows = slice(b * k, (b + 1) * k)
      present = w[rows] > 0
      size = int(present.sum())
      assert np.all(present[:size]) and not np.any(present[size:])
      assert np.all(x[rows][~present] == 0) and np.all(y[rows][~present] == 0)
      if size:
        np.testing.assert_array_equal(x[rows][:size], y[rows][:size])
        lot.append(list(y[rows][:size]))
    yield lot


def check_lot(lot, k):
  owners = [set(USER_IDS[b]) for b in lot]
  assert all(len(o) == 1 for o in owners)  # a block holds one user
  users = [o.pop() for o in owners]
  assert len(set(users)) == len(users)  # a user at most once per lot
  for user, block in zip(users, lot):
    assert len(set(block)) == len(block) == min(
        k, int(np.sum(USER_IDS == user)))
  return users


def test_poisson_lots_draw_each_user_with_probability_q():
  # 300 lots, q 0.25: each user is drawn Binomial(300, 0.25) times (mean 75,
  # sd 7.5); the mean over 40 users has sd 1.2: tolerance 4 (> 3 sd).
  k, q = 3, 0.25
  dataset = poisson_sampled_users(X, Y, USER_IDS, q, 300, k, seed=1)
  mark = declared_sampling(dataset)
  assert (mark.sampling, mark.sampling_probability, mark.population_size,
          mark.privacy_unit, mark.max_examples_per_user) == (
              "poisson", q, 40, "user", k)
  drawn, taken = {}, {}
  for lot in blocks(dataset, k):
    for user, block in zip(check_lot(lot, k), lot):
      drawn[user] = drawn.get(user, 0) + 1
      for i in block:
        taken[i] = taken.get(i, 0) + 1
  assert np.mean([drawn.get(f"user{u}", 0) for u in range(40)]) == (
      pytest.approx(75, abs=4))
  # Which k: a uniform subset. A user of 6 examples (k = 3) gives each of
  # them in half of its lots (each about 75 / 2 = 37.5 times, sd ~5).
  six = [i for i in range(len(USER_IDS)) if COUNTS[int(
      USER_IDS[i][4:])] == 6]
  assert np.mean([taken.get(i, 0) for i in six]) == pytest.approx(
      37.5, abs=5)


def test_fixed_size_lots_hold_exactly_the_users_asked_for():
  k = 4
  dataset = fixed_size_sampled_users(X, Y, USER_IDS, 5, 20, k, seed=2,
                                     batches_per_lot=2)
  mark = declared_sampling(dataset)
  assert (mark.sampling, mark.population_size, mark.batches_per_lot,
          mark.privacy_unit, mark.max_examples_per_user) == (
              "fixed_size", 40, 2, "user", k)
  batches = list(blocks(dataset, k))
  assert len(batches) == 40
  for first, second in zip(batches[::2], batches[1::2]):
    assert len(first) == len(second) == 5
    check_lot(first + second, k)  # no user in both batches of a lot


def test_ids_of_mixed_kinds_are_refused():
  # np.asarray([1, "1"]) is ["1", "1"]: two users would be sampled and
  # clipped as one (and an object array of both fails to sort).
  x, y = X[:4], Y[:4]
  for ids in ([1, "1", 2, 2], np.array([1, "1", 2, 2], dtype=object),
              [b"a", "a", "b", "b"]):
    with pytest.raises(ValueError, match="user_ids mixes ids of kinds"):
      poisson_sampled_users(x, y, ids, 0.5, 2, 3)
  # One kind in several types (int, numpy int, float) stays as numpy reads
  # it: 1, np.int64(1) and 1.0 are one user.
  dataset = fixed_size_sampled_users(x, y, [1, np.int64(1), 1.0, 2], 2, 1, 3)
  assert declared_sampling(dataset).population_size == 2


def test_bad_arguments_name_the_argument():
  with pytest.raises(ValueError, match="user_ids must hold one user id per "
                     "example: a 1-D array of 155"):
    poisson_sampled_users(X, Y, USER_IDS[:-1], 0.1, 2, 3)
  with pytest.raises(ValueError, match="max_examples_per_user"):
    poisson_sampled_users(X, Y, USER_IDS, 0.1, 2, 0)
  with pytest.raises(ValueError, match=r"users_per_batch \* batches_per_lot "
                     r"must lie in \[1, users=40\]; got 41"):
    fixed_size_sampled_users(X, Y, USER_IDS, 41, 2, 3)
  dataset = tf_dp.data.poisson_sampled_users(X, Y, USER_IDS, 0.1, 2, 3)
  with pytest.raises(ValueError, match="already marked"):
    tf_dp.data.declare_sampling(dataset, "poisson", 0.1)
  with pytest.raises(ValueError, match="max_examples_per_user .* exactly "
                     "when privacy_unit='user'"):
    tf_dp.data.declare_sampling(dataset.map(lambda *t: t), "poisson", 0.1,
                                privacy_unit="user")
