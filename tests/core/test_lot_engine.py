"""The framework-neutral DP step, driven directly (no Keras): lots, noise
once per lot, one ledger sample per lot, the budget guard, the replica
merge, and an open lot that no checkpoint holds."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from tf_dp import dp_query
from tf_dp.core import config as config_lib
from tf_dp.core import lot_engine
from tf_dp.core import vectorized

GRADIENTS = lot_engine.GRADIENTS
CLIP, STDDEV, SEED = 1.0, 0.8, 17
SHAPES = ([3, 2], [2])


def _query(stddev=STDDEV):
  return dp_query.GaussianSumQuery(CLIP, stddev, noise_seed=SEED)


def _engine(stddev=STDDEV, **config):
  config.setdefault("population_size", 100)
  config.setdefault("sampling", "fixed_size")
  cfg = config_lib.DPConfig(l2_norm_clip=None, noise_multiplier=None,
                            dp_query=_query(stddev), **config)
  engine = lot_engine.LotEngine(cfg)
  templates = [tf.zeros(s) for s in SHAPES]
  engine.build_query({GRADIENTS: engine.config.dp_query},
                     {GRADIENTS: templates})
  return engine


def _record_gradients(records, seed):
  rng = np.random.default_rng(seed)
  return [tf.constant(3.0 * rng.normal(size=[records] + s), tf.float32)
          for s in SHAPES]


def _add(engine, grads, applied):
  """Clips ``grads`` (one batch) with the engine's query and adds it."""
  params = engine.sample_params()[GRADIENTS]
  batch_sum = vectorized.clipped_sum(engine.gradient_query, params, grads)
  records = tf.cast(tf.shape(grads[0])[0], tf.float32)
  engine.add_batch({GRADIENTS: batch_sum}, records, records,
                   lambda mean: applied.append([m.numpy() for m in mean]))
  return batch_sum


def test_a_lot_of_k_batches_is_noised_once_and_recorded_once():
  k, batch = 3, 4
  engine = _engine(gradient_accumulation_steps=k)
  applied, sums = [], []
  for i in range(k):
    assert not applied and int(engine.ledger.sample_count) == 0
    sums.append(_add(engine, _record_gradients(batch, i), applied))
  assert len(applied) == 1
  assert int(engine.ledger.sample_count) == 1
  assert int(engine.batches_in_lot.numpy()) == 0  # a fresh lot is open
  # The same seed and nonce noise the lot's whole sum once: exactly what a
  # single get_noised_result of the summed batches gives.
  query = _query()
  total = [sum(s[j] for s in sums) for j in range(len(SHAPES))]
  expected, _, _ = query.get_noised_result(total, query.initial_global_state())
  for got, want, clean in zip(applied[0], expected, total):
    np.testing.assert_array_equal(got, want.numpy() / (k * batch))
    assert np.max(np.abs(got * k * batch - clean.numpy())) > 0.1  # noised
  samples = engine.ledger.to_dict()["samples"]
  assert len(samples) == 1
  assert [q["noise_stddev"] for q in samples[0]["sum_queries"]] == [
      pytest.approx(STDDEV)]


def test_fixed_size_lot_is_divided_by_its_records_and_records_q():
  engine = _engine(stddev=0.0, population_size=50, num_microbatches=2)
  applied = []
  grads = _record_gradients(2, 0)  # two records (microbatches) of 5 each
  params = engine.sample_params()[GRADIENTS]
  batch_sum = vectorized.clipped_sum(engine.gradient_query, params, grads)
  engine.add_batch({GRADIENTS: batch_sum}, tf.constant(2.0),
                   tf.constant(10.0),
                   lambda mean: applied.append([m.numpy() for m in mean]))
  for got, want in zip(applied[0], batch_sum):
    np.testing.assert_allclose(got, want.numpy() / 2, rtol=1e-6)
  (sample,) = engine.ledger.to_dict()["samples"]
  assert sample["population_size"] == 50
  assert sample["sampling_probability"] == pytest.approx(10 / 50)
  assert sample["examples_per_record"] == 5


def test_poisson_lot_is_divided_by_q_times_n_whatever_was_drawn():
  engine = _engine(stddev=0.0, population_size=80, sampling="poisson",
                   sampling_probability=0.1)
  applied = []
  grads = _record_gradients(5, 1)
  params = engine.sample_params()[GRADIENTS]
  batch_sum = vectorized.clipped_sum(engine.gradient_query, params, grads)
  engine.add_batch({GRADIENTS: batch_sum}, tf.constant(5.0),
                   tf.constant(5.0),
                   lambda mean: applied.append([m.numpy() for m in mean]))
  for got, want in zip(applied[0], batch_sum):
    np.testing.assert_allclose(got, want.numpy() / 8.0, rtol=1e-6)
  (sample,) = engine.ledger.to_dict()["samples"]
  assert sample["sampling_probability"] == pytest.approx(0.1)  # the sampler's


def test_the_budget_guard_stops_lots_beyond_allowed_lots():
  engine = _engine(gradient_accumulation_steps=2)
  engine.allowed_lots.assign(1)
  applied = []
  for i in range(4):  # two lots' worth of batches
    _add(engine, _record_gradients(3, i), applied)
  assert len(applied) == 1
  assert int(engine.ledger.sample_count) == 1
  assert int(engine.batches_in_lot.numpy()) == 0  # nothing more was added
  engine.allowed_lots.assign(lot_engine.UNLIMITED_LOTS)
  for i in range(2):
    _add(engine, _record_gradients(3, i), applied)
  assert len(applied) == 2 and int(engine.ledger.sample_count) == 2


def test_discarded_lot_releases_nothing():
  engine = _engine(gradient_accumulation_steps=3)
  applied = []
  _add(engine, _record_gradients(3, 0), applied)
  assert engine.discard_lot() == 1
  assert int(engine.batches_in_lot.numpy()) == 0
  assert all(not np.any(v.numpy()) for v in tf.nest.flatten(engine.lot_state))
  assert not applied and int(engine.ledger.sample_count) == 0


def test_one_record_replaced_moves_the_released_sum_by_at_most_2c():
  """Neighbouring lots (one record replaced), noise 0: the released sum
  moves by at most 2C."""
  def released_sum(grads):
    engine = _engine(stddev=0.0)
    applied = []
    _add(engine, grads, applied)
    return np.concatenate([m.ravel() for m in applied[0]]) * 6

  grads = _record_gradients(6, 0)
  neighbour = [g.numpy().copy() for g in grads]
  for g in neighbour:
    g[2] *= -50.0  # record 2 replaced by a far-away one, opposite direction
  moved = np.linalg.norm(released_sum(grads) - released_sum(
      [tf.constant(g) for g in neighbour]))
  # The opposite record reaches the bound; float32 rounding of sums of norm
  # <= 6C stays below 1e-5. Without clipping it would move by ~150.
  assert 1.99 * CLIP < moved <= 2 * CLIP + 1e-5


def test_the_open_lot_is_in_no_checkpoint(tmp_path):
  engine = _engine(gradient_accumulation_steps=2)
  _add(engine, _record_gradients(3, 0), [])
  assert int(engine.batches_in_lot.numpy()) == 1
  path = tf.train.Checkpoint(engine=engine).save(str(tmp_path / "ckpt"))
  keys = tf.train.load_checkpoint(path).get_variable_to_shape_map()
  assert any("ledger" in k for k in keys)
  assert any("global_state" in k for k in keys)
  assert any("allowed_lots" in k for k in keys)
  assert not any("lot" in k.replace("allowed_lots", "") for k in keys), keys


def test_one_replica_strategy_merges_and_records_one_sample_per_lot():
  strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
  with strategy.scope():
    engine = _engine(stddev=0.0, gradient_accumulation_steps=2)
  grads = _record_gradients(4, 0)
  applied = []

  @tf.function
  def step():
    def replica_fn():
      params = engine.sample_params()[GRADIENTS]
      batch_sum = vectorized.clipped_sum(engine.gradient_query, params,
                                         grads)
      return engine.add_batch({GRADIENTS: batch_sum}, tf.constant(4.0),
                              tf.constant(4.0), applied.append)
    strategy.run(replica_fn)

  step()
  step()
  assert int(engine.ledger.sample_count) == 1
  assert applied  # traced once per replica apply


def test_a_missing_gradients_part_is_refused():
  cfg = config_lib.DPConfig(l2_norm_clip=1.0, noise_multiplier=1.0,
                            population_size=10, sampling="fixed_size")
  engine = lot_engine.LotEngine(cfg)
  with pytest.raises(ValueError, match="'grads' part"):
    engine.build_query({"other": _query()}, {"other": [tf.zeros([2])]})


def test_unknown_population_size_is_refused_before_any_step():
  cfg = config_lib.DPConfig(l2_norm_clip=1.0, noise_multiplier=1.0)
  engine = lot_engine.LotEngine(cfg)
  with pytest.raises(ValueError, match="population_size is unknown"):
    engine.require_population_size()


def test_a_lot_of_one_batch_keeps_no_state_between_steps():
  # With one batch per lot the step that clips a lot releases it: no
  # variables of the gradients' size are kept (k > 1 keeps one per part).
  assert _engine().lot_state is None
  kept = _engine(gradient_accumulation_steps=2).lot_state
  assert ([v.shape.as_list() for v in tf.nest.flatten(kept)]
          == [list(s) for s in SHAPES])
  engine = _engine()
  engine.config = dataclasses.replace(engine.config,
                                      gradient_accumulation_steps=2)
  with pytest.raises(ValueError, match="gradient_accumulation_steps"):
    _add(engine, _record_gradients(3, 0), [])
