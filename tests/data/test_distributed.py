"""Tests of a sampler's lots cut into parts per replica
(``tf_dp.data.distribute_lots`` and the samplers' ``LotRecipe``).

Under a strategy of R replicas, replica r reads part r of every batch: the
parts of a batch, joined in order, must be the batch of the one-process
dataset (the same lots from the same key), up to the padding of weight 0 a
Poisson batch gets to split evenly. Multi-worker runs are in
tests/distribute.
"""

import numpy as np
import pytest
import tensorflow as tf

import tf_dp
from tf_dp.data import distributed
from tf_dp.data import lots as lots_lib
from tf_dp.errors import SamplingMismatchError

N = 30
K = 3  # max_examples_per_user


def _data():
  x = np.arange(N, dtype=np.float32)[:, None] + 1.0  # row i holds i + 1
  y = np.arange(N, dtype=np.int64)
  ids = np.repeat(np.arange(12), [1 + u % 4 for u in range(12)])[:N]
  return x, y, np.concatenate([ids, np.full(N - len(ids), 99)])


def _samplers():
  x, y, ids = _data()
  return {
      "poisson": tf_dp.data.poisson_sampled_batches(
          x, y, 0.3, 4, seed=3, batches_per_lot=2),
      "fixed": tf_dp.data.fixed_size_sampled_batches(
          x, y, 6, 4, seed=3, batches_per_lot=2),
      "poisson_users": tf_dp.data.poisson_sampled_users(
          x, y, ids, 0.5, 4, K, seed=3, batches_per_lot=2),
      "fixed_users": tf_dp.data.fixed_size_sampled_users(
          x, y, ids, 4, 4, K, seed=3, batches_per_lot=2),
  }


def _rows(batch):
  """The examples (``x``'s ids) of a batch present (weight > 0)."""
  x = batch[0].numpy()[:, 0]
  if len(batch) == 3:
    x = x[batch[2].numpy() > 0]
  return x


@pytest.mark.parametrize("kind", ["poisson", "fixed", "poisson_users",
                                  "fixed_users"])
@pytest.mark.parametrize("parts", [2, 3])
def test_parts_of_each_batch_join_into_the_batch(kind, parts):
  dataset = _samplers()[kind]
  recipe = lots_lib.lot_recipe(dataset)
  if kind.startswith("fixed") and parts == 3:
    # 6 examples or 4 users per batch: 6 splits in 3, 4 users do not.
    if kind == "fixed_users":
      with pytest.raises(SamplingMismatchError, match="multiple of 3 users"):
        recipe.dataset(recipe.key, parts, 0, parts)
      return
  whole = list(recipe.dataset(recipe.key, 1, 0, 1))
  cut = list(recipe.dataset(recipe.key, parts, 0, parts))
  assert len(whole) == recipe.batches == 8
  assert len(cut) == parts * len(whole)
  for b, batch in enumerate(whole):
    pieces = cut[b * parts:(b + 1) * parts]
    # Every part has the same static shape (replicas trace one step).
    assert len({tuple(p[0].shape) for p in pieces}) == 1
    joined = np.concatenate([_rows(p) for p in pieces])
    np.testing.assert_array_equal(joined, _rows(batch))
    if kind.endswith("users"):
      # Whole users: each part holds blocks of K rows.
      assert pieces[0][0].shape[0] % K == 0


def test_a_worker_reads_only_its_parts():
  dataset = _samplers()["poisson"]
  recipe = lots_lib.lot_recipe(dataset)
  every = list(recipe.dataset(recipe.key, 4, 0, 4))
  second_worker = list(recipe.dataset(recipe.key, 4, 2, 2))
  assert len(second_worker) == len(every) // 2
  for b in range(recipe.batches):
    for r in range(2):
      np.testing.assert_array_equal(second_worker[2 * b + r][0].numpy(),
                                    every[4 * b + 2 + r][0].numpy())


def test_padding_rows_hold_no_data_and_no_weight():
  x, y, _ = _data()
  # Batches of 13 padded rows cut in 2: a 14th row of weight 0 is added,
  # 7 rows a part.
  dataset = tf_dp.data.poisson_sampled_batches(x, y, 0.3, 3,
                                               max_batch_size=13, seed=1)
  recipe = lots_lib.lot_recipe(dataset)
  for xb, yb, w in recipe.dataset(recipe.key, 2, 0, 2):
    assert xb.shape[0] == 7
    absent = w.numpy() == 0
    assert np.all(xb.numpy()[absent] == 0) and np.all(yb.numpy()[absent] == 0)


def test_class_weights_survive_the_cut():
  x, y, _ = _data()
  dataset = tf_dp.data.poisson_sampled_batches(x, y % 2, 0.3, 2, seed=1)
  weighted = lots_lib.with_class_weights(dataset, {0: 2.0})
  recipe = lots_lib.lot_recipe(weighted)
  for xb, yb, w in recipe.dataset(recipe.key, 2, 0, 2):
    present = xb.numpy()[:, 0] > 0
    expected = np.where(yb.numpy() == 0, 2.0, 1.0) * present
    np.testing.assert_array_equal(w.numpy(), expected)


def test_distribute_lots_refuses_what_it_cannot_redraw():
  x, y, _ = _data()
  strategy = tf.distribute.get_strategy()
  declared = tf_dp.data.declare_sampling(
      tf.data.Dataset.from_tensor_slices((x, y)).batch(5), "poisson",
      sampling_probability=0.2)
  with pytest.raises(SamplingMismatchError, match="cannot be redrawn"):
    tf_dp.data.distribute_lots(strategy, declared)
  derived = _samplers()["poisson"].map(lambda *b: b)
  with pytest.raises(SamplingMismatchError, match="cannot be redrawn"):
    tf_dp.data.distribute_lots(strategy, derived)
  with pytest.raises(ValueError, match="passes"):
    tf_dp.data.distribute_lots(strategy, _samplers()["poisson"], passes=0)


def test_distribute_lots_on_one_replica_is_the_sampler():
  strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
  dataset = _samplers()["fixed_users"]
  got = list(tf_dp.data.distribute_lots(strategy, dataset, passes=2))
  assert distributed.distributed_declaration(
      tf_dp.data.distribute_lots(strategy, dataset)) == (
          lots_lib.declared_sampling(dataset))
  recipe = lots_lib.lot_recipe(dataset)
  assert len(got) == 2 * recipe.batches
  first_pass = list(recipe.dataset(recipe.key, 1, 0, 1))
  for a, b in zip(got, first_pass):
    np.testing.assert_array_equal(np.asarray(a[0]), b[0].numpy())


def test_shared_key_without_a_strategy_is_the_own_key():
  assert distributed.shared_key(tf.distribute.get_strategy(), -5) == -5
