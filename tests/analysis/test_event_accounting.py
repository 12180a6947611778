"""Ledger epsilon under both accountants (tf_dp.analysis.event_accounting)."""

import math

import pytest

from tf_dp import analysis
from tf_dp.analysis import event_accounting
from tf_dp.analysis.ledger import LedgerEvent


def ledger(runs):
  """A version-2 ledger export of (sampling, q, sigma, count) runs."""
  return {"format": "tf_dp.privacy_ledger/2", "dropped_samples": 0,
          "runs": [{"population_size": 1000, "sampling_probability": q,
                    "sampling": sampling, "examples_per_record": 1,
                    "sum_queries": [{"l2_norm_clip": 1.0,
                                     "noise_stddev": sigma}],
                    "count": count} for sampling, q, sigma, count in runs]}


def test_ledger_epsilon_matches_run_epsilon_for_both_accountants():
  data = ledger([("poisson", 0.016, 1.1, 300)])
  for accountant in ("pld", "rdp"):
    eps, order = analysis.compute_epsilon_from_ledger(data, 1e-5,
                                                      accountant=accountant)
    expected, expected_order = analysis.compute_dp_sgd_privacy(
        1000, 16, 1.1, 300 * 16 / 1000, 1e-5, accountant=accountant)
    assert eps == pytest.approx(expected, rel=1e-9)
    assert math.isnan(order) == math.isnan(expected_order)
  pld, _ = analysis.compute_epsilon_from_ledger(data, 1e-5)
  rdp, _ = analysis.compute_epsilon_from_ledger(data, 1e-5, accountant="rdp")
  assert pld < rdp


def test_fixed_size_and_shuffled_are_accounted_as_fixed_size():
  fixed = analysis.compute_epsilon_from_ledger(
      ledger([("fixed_size", 0.25, 2.0, 12)]), 1e-5)[0]
  with pytest.warns(UserWarning, match="shuffled"):
    shuffled = analysis.compute_epsilon_from_ledger(
        ledger([("shuffled", 0.25, 2.0, 12)]), 1e-5)[0]
  expected, _ = analysis.compute_dp_sgd_privacy(
      1000, 250, 2.0, 3, 1e-5, sampling="fixed_size")
  assert fixed == shuffled == pytest.approx(expected, rel=1e-9)


def test_mixed_ledger_is_at_least_each_part():
  both = ledger([("poisson", 0.01, 1.0, 100), ("fixed_size", 0.01, 2.0, 100)])
  eps = analysis.compute_epsilon_from_ledger(both, 1e-5)[0]
  for part in both["runs"]:
    alone = dict(both, runs=[part])
    assert eps > analysis.compute_epsilon_from_ledger(alone, 1e-5)[0]


def test_rdp_options_select_rdp_and_pld_refuses_them():
  data = ledger([("poisson", 0.01, 1.0, 10)])
  _, order = analysis.compute_epsilon_from_ledger(data, 1e-5,
                                                  orders=[2.0, 8.0, 32.0])
  assert order in (2.0, 8.0, 32.0)
  with pytest.raises(ValueError, match="orders"):
    analysis.compute_epsilon_from_ledger(data, 1e-5, orders=[2.0],
                                         accountant="pld")


def test_poisson_microbatches_are_refused_by_both():
  run = LedgerEvent("poisson", 0.01, 1.0, 1000, 4)
  for accountant in ("pld", "rdp"):
    with pytest.raises(ValueError, match="microbatch"):
      event_accounting.epsilon_of_runs([(run, 3)], 1e-5,
                                       accountant=accountant)


def test_many_distinct_rdp_events_are_merged_pessimistically():
  runs = [(LedgerEvent("poisson", 0.01, 1.0 + i / 1000, 1000, 1), 1)
          for i in range(600)]
  exact = event_accounting.rdp_of_runs(runs, max_distinct_events=None)
  merged = event_accounting.rdp_of_runs(runs)
  # No noise multiplier moves down by more than one grid step.
  step = math.log(1.599) / event_accounting.RDP_MAX_DISTINCT_EVENTS
  worst = event_accounting.rdp_of_runs(
      [(e._replace(noise_multiplier=e.noise_multiplier * math.exp(-step)), c)
       for e, c in runs], max_distinct_events=None)
  assert (merged >= exact).all() and (merged <= worst * (1 + 1e-12)).all()
  assert (merged > exact).any()
