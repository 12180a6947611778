"""Tests of PrivacyLedger and QueryWithLedger."""

import json
import math

import numpy as np
import pytest
import tensorflow as tf

from tf_dp import analysis
from tf_dp.dp_query import GaussianSumQuery
from tf_dp.dp_query import NestedQuery
from tf_dp.dp_query import NoPrivacyAverageQuery
from tf_dp.privacy_ledger import PrivacyLedger
from tf_dp.privacy_ledger import QueryWithLedger
from tests.dp_query.test_gaussian_query import run_query

ORDERS = [1.5, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]


def two_group_ledger(samples=3, jit=False, max_samples=100):
  ledger = PrivacyLedger(1000, 0.05, max_samples=max_samples)
  query = QueryWithLedger(NestedQuery([GaussianSumQuery(1.0, 2.0),
                                       GaussianSumQuery(0.5, 3.0)]), ledger)
  template = [tf.zeros([3]), tf.zeros([2])]

  @tf.function(jit_compile=jit)
  def step(state):
    params = query.derive_sample_params(state)
    sample = query.initial_sample_state(template)
    sample = query.accumulate_record(params, sample, template)
    _, state, _ = query.get_noised_result(sample, state)
    return state

  state = query.initial_global_state()
  for _ in range(samples):
    state = step(state)
  return ledger


def closed_form_rdp(samples):
  z = ((1.0 / 2.0) ** 2 + (0.5 / 3.0) ** 2) ** -0.5  # eq. (1).
  return analysis.compute_rdp(0.05, z, samples, ORDERS)


@pytest.mark.parametrize("jit", [False, True])
def test_three_samples_of_two_group_query_match_closed_form(jit):
  ledger = two_group_ledger(3, jit=jit)
  data = ledger.to_dict()
  assert len(data["samples"]) == 3
  assert all(len(s["sum_queries"]) == 2 for s in data["samples"])
  np.testing.assert_allclose(analysis.compute_rdp_from_ledger(ledger, ORDERS),
                             closed_form_rdp(3), rtol=1e-6)


def test_checkpoint_round_trip_preserves_entries_and_epsilon(tmp_path):
  ledger = two_group_ledger(3)
  eps = analysis.compute_epsilon_from_ledger(ledger, 1e-5)[0]
  path = tf.train.Checkpoint(ledger=ledger).save(str(tmp_path / "ckpt"))
  restored = PrivacyLedger(1000, 0.05, max_samples=100)
  tf.train.Checkpoint(ledger=restored).restore(path).assert_consumed()
  assert restored.to_dict() == ledger.to_dict()
  assert analysis.compute_epsilon_from_ledger(restored, 1e-5)[0] == eps


def test_json_round_trip_preserves_epsilon():
  ledger = two_group_ledger(4)
  text = ledger.to_json()
  json.loads(text)  # valid JSON
  eps = analysis.compute_epsilon_from_ledger(ledger, 1e-5)[0]
  assert analysis.compute_epsilon_from_ledger(text, 1e-5)[0] == eps
  rebuilt = PrivacyLedger.from_json(text)
  assert rebuilt.to_dict() == ledger.to_dict()


def test_overflow_is_counted_and_refused():
  ledger = two_group_ledger(5, jit=True, max_samples=3)
  data = ledger.to_dict()
  assert len(data["samples"]) == 3 and data["dropped_samples"] == 2
  with pytest.raises(ValueError, match="did not record 2 sample"):
    analysis.compute_rdp_from_ledger(ledger)


def test_non_private_query_gives_infinite_epsilon():
  ledger = PrivacyLedger(100, 0.1)
  query = QueryWithLedger(NoPrivacyAverageQuery(), ledger)
  run_query(query, [tf.constant([1.0])])
  assert analysis.compute_epsilon_from_ledger(ledger, 1e-5)[0] == math.inf


def test_sample_size_changes_are_recorded():
  ledger = PrivacyLedger(100, 0.1, sampling="fixed_size")
  query = QueryWithLedger(GaussianSumQuery(1.0, 1.0), ledger)
  state = query.initial_global_state()
  _, state, _ = run_query(query, [tf.zeros([2])], state)
  ledger.set_sample_size(sampling_probability=0.2)
  run_query(query, [tf.zeros([2])], state)
  samples = ledger.to_dict()["samples"]
  assert [s["sampling_probability"] for s in samples] == pytest.approx(
      [0.1, 0.2])
  assert {s["sampling"] for s in samples} == {"fixed_size"}


@pytest.mark.parametrize("kwargs,match", [
    (dict(population_size=0, sampling_probability=0.1), "population_size"),
    (dict(population_size=10, sampling_probability=1.5),
     "sampling_probability"),
    (dict(population_size=10, sampling_probability=0.1, sampling="shuffle"),
     "sampling"),
    (dict(population_size=10, sampling_probability=0.1,
          examples_per_record=0), "examples_per_record"),
])
def test_invalid_arguments(kwargs, match):
  with pytest.raises(ValueError, match=match):
    PrivacyLedger(**kwargs)


def test_query_with_ledger_type_checks():
  with pytest.raises(TypeError, match="ledger"):
    QueryWithLedger(GaussianSumQuery(1.0, 1.0), object())


def test_user_level_ledger_records_its_unit_and_restores_it(tmp_path):
  ledger = PrivacyLedger(300, 0.1, privacy_unit="user", max_samples=10)
  assert (ledger.privacy_unit, ledger.sampling) == ("user", "poisson")
  query = QueryWithLedger(GaussianSumQuery(1.0, 1.0), ledger)
  state = query.initial_global_state()
  sample = query.initial_sample_state(tf.zeros([2]))
  query.get_noised_result(sample, state)
  data = ledger.to_dict()
  assert data["samples"][0]["privacy_unit"] == "user"
  assert data["samples"][0]["population_size"] == 300
  assert PrivacyLedger.from_json(ledger.to_json()).privacy_unit == "user"
  path = tf.train.Checkpoint(ledger=ledger).save(str(tmp_path / "ckpt"))
  restored = PrivacyLedger(300, 0.1, max_samples=10)  # per example
  tf.train.Checkpoint(ledger=restored).restore(path)
  assert restored.privacy_unit == "user"
  assert restored.to_dict() == data
  with pytest.raises(ValueError, match="privacy_unit must be one of"):
    PrivacyLedger(300, 0.1, privacy_unit="users")
