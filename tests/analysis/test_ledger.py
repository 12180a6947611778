"""Tests of post-hoc ledger accounting (pure Python, plain-data ledgers)."""

import math

import numpy as np
import pytest

from tf_dp import analysis

ORDERS = [float(o) for o in range(2, 65)]


def sample(q=0.01, queries=((1.0, 1.1),), sampling="poisson", n=60000,
           per_record=1):
  return {"population_size": n, "selection_probability": q,
          "sampling": sampling, "examples_per_record": per_record,
          "sum_queries": [{"l2_norm_clip": c, "noise_stddev": s}
                          for c, s in queries]}


def ledger(samples, dropped=0):
  return {"format": "tf_dp.privacy_ledger/1", "dropped_samples": dropped,
          "samples": samples}


def test_eq1_reduction_by_hand():
  z = analysis.sample_noise_multiplier(
      [{"l2_norm_clip": 3.0, "noise_stddev": 6.0},
       {"l2_norm_clip": 4.0, "noise_stddev": 8.0}])
  assert z == pytest.approx(((0.5 ** 2) * 2) ** -0.5)


def test_homogeneous_ledger_matches_compute_rdp():
  data = ledger([sample()] * 10)
  np.testing.assert_allclose(analysis.compute_rdp_from_ledger(data, ORDERS),
                             analysis.compute_rdp(0.01, 1.1, 10, ORDERS))


def test_fixed_size_ledger_uses_sampling_without_replacement():
  data = ledger([sample(sampling="fixed_size")] * 7)
  np.testing.assert_allclose(
      analysis.compute_rdp_from_ledger(data, ORDERS),
      analysis.compute_rdp_sample_without_replacement(0.01, 1.1, 7, ORDERS))


def test_zero_noise_is_infinite_and_zero_clip_is_free():
  assert analysis.compute_epsilon_from_ledger(
      ledger([sample(queries=((1.0, 0.0),))]), 1e-5)[0] == math.inf
  assert analysis.compute_epsilon_from_ledger(
      ledger([sample(queries=((0.0, 0.0),))]), 1e-5)[0] == 0.0
  np.testing.assert_array_equal(analysis.compute_rdp_from_ledger(
      ledger([sample(queries=((0.0, 0.0),))]), ORDERS), 0.0)


def test_dropped_samples_are_refused():
  with pytest.raises(ValueError, match="max_samples"):
    analysis.compute_rdp_from_ledger(ledger([sample()], dropped=1))


def test_poisson_microbatch_ledger_is_refused():
  with pytest.raises(ValueError, match="microbatch"):
    analysis.compute_rdp_from_ledger(ledger([sample(per_record=4)]))


def test_reprocess_with_dp_accounting():
  dp_accounting = pytest.importorskip("dp_accounting")
  data = ledger([sample(0.01, ((1.0, 1.1),))] * 50
                + [sample(0.02, ((1.0, 2.0), (0.5, 1.0)))] * 20)
  acc = dp_accounting.rdp.RdpAccountant(ORDERS)
  for event in analysis.to_dp_accounting_events(data):
    acc.compose(event)
  ours = analysis.compute_epsilon_from_ledger(data, 1e-5, ORDERS)[0]
  assert ours == pytest.approx(acc.get_epsilon(1e-5), rel=1e-8)
