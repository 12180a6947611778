"""Lots drawn over users: the sampling of user-level DP-SGD.

When one person contributes many examples, the privacy unit is the user
(``DPOptimizer(privacy_unit="user")``): the neighbouring data sets differ
in one user and all their examples. These samplers draw users, not
examples, as the accountant then assumes:

* ``poisson_sampled_users``: each user is in a lot independently with
  probability q (add/remove one user);
* ``fixed_size_sampled_users``: a uniformly random subset of a fixed number
  of users per lot (replace one user).

User ids come with the data, one per example (``user_ids``, any hashable
values of a numpy array: ints or strings). A user in a lot contributes at
most ``max_examples_per_user`` = k of their examples: a uniformly random
subset of k of them, drawn afresh for every lot, or all of them when the
user has k or fewer. Each user in a lot occupies k consecutive rows of its
batch, the user's examples first, then padding rows (zeros, weight 0):
``privacy_unit="user"`` reads every k consecutive rows as one user's
record, so no user id needs to reach the model. Elements are
``(x, y, weight)`` batches with the same shapes in every lot.
"""

import math
import numbers
from typing import Any, Optional, Tuple

import numpy as np
import tensorflow as tf

from tf_dp.analysis import checks
from tf_dp.data import lots
from tf_dp.data import poisson
from tf_dp.sampling import Sampling


def _id_kind(user_id: Any) -> str:
  """What kind of value a user id is: equal ids of one kind are one user."""
  if isinstance(user_id, (str, np.str_)):
    return "str"
  if isinstance(user_id, (bytes, np.bytes_)):
    return "bytes"
  if isinstance(user_id, (numbers.Number, np.number)):
    return "number"
  return type(user_id).__name__


def _user_index(x: Any, user_ids: Any) -> Tuple[np.ndarray, int]:
  """Each example's user as an index in [0, users), and the users.

  Raises:
    ValueError: if the ids mix kinds (numbers and strings, say): numpy
      would make ``1`` and ``"1"`` one user (or fail to order them).
  """
  n = len(tf.nest.flatten(x)[0])
  if not isinstance(user_ids, np.ndarray) or user_ids.dtype == object:
    kinds = sorted({_id_kind(u) for u in np.asarray(user_ids,
                                                     dtype=object).ravel()})
    if len(kinds) > 1:
      raise ValueError(
          f"user_ids mixes ids of kinds {kinds}: numpy would turn 1 and "
          f"'1' into one user (or fail to order them), and two people "
          f"read as one user are not protected as users. Give every id "
          f"the same type (e.g. all strings).")
  ids = np.asarray(user_ids)
  if ids.ndim != 1 or len(ids) != n:
    raise ValueError(f"user_ids must hold one user id per example: a 1-D "
                     f"array of {n}; got shape {ids.shape}.")
  _, index = np.unique(ids, return_inverse=True)
  return index.astype(np.int64), int(index.max()) + 1 if n else 0


def _check_k(max_examples_per_user):
  return checks.check_positive_int(
      "max_examples_per_user", max_examples_per_user,
      " It is the number of a user's examples a lot may hold (the "
      "DPOptimizer's max_examples_per_user).")


def _chooser(user_index, users, k, lot_users, pick_users):
  """``choose(draws)`` for ``lots.lot_dataset``: ``lot_users`` blocks of k
  rows, the users ``pick_users(user_draws)`` selects in the first ones.

  The draws are one word per user, then one per example: a user's
  examples are ranked by their draws (a uniformly random order, fresh per
  lot: the words are distinct but with probability below n^2 / 2^65) and
  the first k fill the user's block.
  """
  n = len(user_index)
  counts = np.bincount(user_index, minlength=users)
  starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
  user_of = tf.constant(user_index)
  start_of = tf.constant(starts)
  rows = lot_users * k

  def choose(draws):
    chosen = pick_users(draws[:users])
    m = tf.shape(chosen)[0]
    tf.debugging.assert_less_equal(
        m, lot_users, message=(
            "tf_dp: a Poisson lot drew more users than max_users_per_lot; "
            "raise it."))
    block = tf.tensor_scatter_nd_update(
        -tf.ones([users], tf.int64), chosen[:, None],
        tf.range(tf.cast(m, tf.int64)))
    # Examples grouped by user (ascending), in random order within a user.
    by_draw = tf.argsort(draws[users:])
    order = tf.gather(by_draw, tf.argsort(tf.gather(user_of, by_draw),
                                          stable=True))
    owner = tf.gather(user_of, order)
    rank = tf.range(n, dtype=tf.int64) - tf.gather(start_of, owner)
    slot = tf.gather(block, owner)
    taken = (rank < k) & (slot >= 0)
    row = tf.boolean_mask(slot * k + rank, taken)[:, None]
    index = tf.scatter_nd(row, tf.boolean_mask(order, taken), [rows])
    weight = tf.scatter_nd(row, tf.ones_like(row[:, 0], tf.float32), [rows])
    return index, weight

  return choose, n + users


def poisson_sampled_users(x: Any, y: Any, user_ids: Any,
                          sampling_probability: float, num_steps: int,
                          max_examples_per_user: int,
                          max_users_per_lot: Optional[int] = None,
                          seed: Optional[int] = None,
                          batches_per_lot: int = 1) -> tf.data.Dataset:
  """A dataset of ``num_steps`` Poisson lots of users, as ``(x, y, weight)``.

  Privacy contract: every user is in each lot independently with
  probability ``sampling_probability``, and brings at most
  ``max_examples_per_user`` of their examples (a uniformly random subset,
  fresh per lot); lots are independent, also across re-iterations. A lot
  is split into ``batches_per_lot`` batches of whole users. A lot of more
  users than its padded size raises an error instead of being truncated.
  Train with ``DPOptimizer(sampling="poisson", sampling_probability=q,
  privacy_unit="user", max_examples_per_user=k, population_size=<users>)``:
  the ledger then records Poisson samples of users, and epsilon is per
  user.

  Args:
    x: In-memory inputs (an array or a nest of arrays), one row per example.
    y: Their labels (an array or a nest of arrays), one row per example.
    user_ids: One user id per example (a 1-D array: ints or strings).
    sampling_probability: q in (0, 1], the probability per user and lot.
    num_steps: Number of lots; ``round(epochs / q)`` for epochs (over
      users).
    max_examples_per_user: k, the most examples a user brings to a lot;
      each user takes k rows of a batch.
    max_users_per_lot: Padded users per lot; by default mean + 8 sd.
    seed: None (OS entropy) or an int for reproducible tests.
    batches_per_lot: Batches each lot is split into.

  Returns:
    A prefetched ``tf.data.Dataset`` marked as Poisson lots over the users
    (``tf_dp.data.declare_sampling``): pass it to ``fit`` unchanged.

  Example:
    >>> lots = tf_dp.data.poisson_sampled_users(x, y, user_ids, 0.05, 200,
    ...                                         max_examples_per_user=8)
  """
  user_index, users = _user_index(x, user_ids)
  q = checks.check_real("sampling_probability", sampling_probability,
                        low=0.0, high=1.0, low_open=True)
  k = _check_k(max_examples_per_user)
  batches_per_lot = lots.check_batches_per_lot(batches_per_lot)
  if max_users_per_lot is None:
    max_users_per_lot = poisson.default_max_batch_size(users, q)
  max_users = checks.check_positive_int("max_users_per_lot",
                                        max_users_per_lot)
  lot_users = math.ceil(max_users / batches_per_lot) * batches_per_lot
  pick = lambda draws: tf.where(lots.included(draws, q))[:, 0]
  choose, num_draws = _chooser(user_index, users, k, lot_users, pick)
  return lots.lot_dataset(x, y, num_steps, seed, batches_per_lot, choose,
                          stream=2, sampling=Sampling.POISSON,
                          sampling_probability=q, num_draws=num_draws,
                          users=(users, k))


def fixed_size_sampled_users(x: Any, y: Any, user_ids: Any,
                             users_per_batch: int, num_steps: int,
                             max_examples_per_user: int,
                             seed: Optional[int] = None,
                             batches_per_lot: int = 1) -> tf.data.Dataset:
  """A dataset of ``num_steps`` lots of a fixed number of users.

  Privacy contract: each lot is a uniformly random subset (without
  replacement) of ``users_per_batch * batches_per_lot`` of the users,
  drawn independently of all other lots, also across re-iterations; each
  brings at most ``max_examples_per_user`` of their examples (a uniformly
  random subset, fresh per lot). Train with ``DPOptimizer(sampling=
  "fixed_size", privacy_unit="user", max_examples_per_user=k,
  population_size=<users>)``: epsilon is per user (replace-one neighbours).

  Args:
    x: In-memory inputs (an array or a nest of arrays), one row per example.
    y: Their labels (an array or a nest of arrays), one row per example.
    user_ids: One user id per example (a 1-D array: ints or strings).
    users_per_batch: Users per batch (each takes k rows).
    num_steps: Number of lots.
    max_examples_per_user: k, the most examples a user brings to a lot.
    seed: None (OS entropy) or an int for reproducible tests.
    batches_per_lot: Batches per lot (``gradient_accumulation_steps``).

  Returns:
    A prefetched ``tf.data.Dataset`` marked as fixed-size lots over users.
  """
  user_index, users = _user_index(x, user_ids)
  k = _check_k(max_examples_per_user)
  batches_per_lot = lots.check_batches_per_lot(batches_per_lot)
  lot_users = checks.check_positive_int("users_per_batch",
                                        users_per_batch) * batches_per_lot
  if not 1 <= lot_users <= users:
    raise ValueError(f"users_per_batch * batches_per_lot must lie in [1, "
                     f"users={users}]; got {lot_users}.")
  pick = lambda draws: tf.math.top_k(draws, lot_users).indices
  choose, num_draws = _chooser(user_index, users, k, lot_users,
                               lambda d: tf.cast(pick(d), tf.int64))
  return lots.lot_dataset(x, y, num_steps, seed, batches_per_lot, choose,
                          stream=3, sampling=Sampling.FIXED_SIZE,
                          num_draws=num_draws, users=(users, k))
