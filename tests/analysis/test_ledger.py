"""Tests of post-hoc ledger accounting (pure Python, plain-data ledgers)."""

import math
import warnings

import numpy as np
import pytest

from tf_dp import analysis
from tf_dp.analysis import ledger as ledger_lib
from tf_dp.analysis import ledger_schema

ORDERS = [float(o) for o in range(2, 65)]


def sample(q=0.01, queries=((1.0, 1.1),), sampling="poisson", n=60000,
           per_record=1):
  return {"population_size": n, "sampling_probability": q,
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


def test_fixed_size_ledger_uses_fixed_size_rdp():
  data = ledger([sample(sampling="fixed_size")] * 7)
  np.testing.assert_allclose(
      analysis.compute_rdp_from_ledger(data, ORDERS),
      analysis.compute_rdp_fixed_size(0.01, 1.1, 7, ORDERS))


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


def ledger_v2(runs, dropped=0):
  return {"format": "tf_dp.privacy_ledger/2", "dropped_samples": dropped,
          "runs": [dict(s, count=k) for s, k in runs]}


def test_version_2_runs_account_like_the_expanded_samples():
  a, b = sample(0.01, ((1.0, 1.1),)), sample(0.02, ((1.0, 2.0), (0.5, 1.0)))
  runs = ledger_v2([(a, 50), (b, 20), (a, 5)])
  expanded = ledger([a] * 50 + [b] * 20 + [a] * 5)
  np.testing.assert_allclose(analysis.compute_rdp_from_ledger(runs, ORDERS),
                             analysis.compute_rdp_from_ledger(expanded,
                                                              ORDERS),
                             rtol=1e-12)
  assert ledger_schema.encode(ledger_lib.ledger_runs(runs), 0,
                              ledger_schema.FORMAT_V1) == expanded
  assert analysis.ledger_events(runs) == analysis.ledger_events(expanded)
  assert len(analysis.ledger_events(runs)) == 75


def test_ledger_event_runs_merge_equal_events():
  # Eq. (1) reduces both query lists to z = 2: one run of 3 events.
  one = sample(0.01, ((1.0, 2.0),))
  two = sample(0.01, ((1.0, 2.0 * math.sqrt(2)), (1.0, 2.0 * math.sqrt(2))))
  runs = ledger_lib.ledger_event_runs(ledger([one, two, one, sample(0.02)]))
  assert [count for _, count in runs] == [3, 1]
  assert runs[0][0].noise_multiplier == pytest.approx(2.0, rel=1e-15)
  assert runs[0][0] == ledger_lib.LedgerEvent("poisson", 0.01, 2.0, 60000, 1)


def test_million_step_ledger_is_accounted_from_one_run():
  data = ledger_v2([(sample(256 / 60000), 10 ** 6)])
  assert ledger_lib.ledger_event_runs(data) == [
      (ledger_lib.LedgerEvent("poisson", 256 / 60000, 1.1, 60000, 1), 10 ** 6)]
  np.testing.assert_allclose(
      analysis.compute_rdp_from_ledger(data, ORDERS),
      analysis.compute_rdp(256 / 60000, 1.1, 10 ** 6, ORDERS), rtol=1e-12)


def test_shuffled_is_accounted_as_fixed_size_and_warns_once():
  shuffled = ledger([sample(sampling="shuffled")] * 7)
  fixed = ledger([sample(sampling="fixed_size")] * 7)
  with pytest.warns(UserWarning, match="conventional approximation") as rec:
    rdp = analysis.compute_rdp_from_ledger(shuffled, ORDERS)
  assert len([w for w in rec if "shuffled" in str(w.message)]) == 1
  assert "tf_dp.data" in str(rec[0].message)
  np.testing.assert_allclose(rdp,
                             analysis.compute_rdp_from_ledger(fixed, ORDERS))
  with pytest.warns(UserWarning, match="Chua et al. 2024"):
    assert len(analysis.ledger_events(shuffled)) == 7


class _LedgerObject:
  """A ledger object as the accountant reads one (its ``to_dict``)."""

  def __init__(self, export):
    self.export = export

  def to_dict(self, ledger_format=None):
    del ledger_format
    return self.export


def _shuffled_warnings(calls):
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")  # Python's own once-per-line filter off.
    for call in calls:
      call()
  return len([w for w in caught if "'shuffled' sampling" in str(w.message)])


def test_shuffled_warning_is_said_once_per_ledger_object():
  """Tutorial 1 printed it three times for one run (an epoch's epsilon, a
  PrivacyBudget's plan, the user's call): once per ledger object now; a
  new ledger (another run) warns again, an export (no identity: any run's)
  at every call, and warn_shuffled=False says nothing and uses nothing."""
  export = ledger([sample(sampling="shuffled")] * 7)
  run = _LedgerObject(export)
  quiet = lambda: ledger_lib.ledger_event_runs(run, warn_shuffled=False)
  assert _shuffled_warnings([quiet]) == 0
  accountings = [
      lambda: analysis.compute_epsilon_from_ledger(run, 1e-5),
      lambda: analysis.compute_rdp_from_ledger(run, ORDERS),
      lambda: analysis.ledger_events(run),
      lambda: analysis.compute_epsilon_from_ledger(run, 1e-5,
                                                   accountant="rdp")]
  assert _shuffled_warnings(accountings) == 1
  assert _shuffled_warnings(accountings) == 0
  another_run = _LedgerObject(export)
  assert _shuffled_warnings(
      [lambda: analysis.compute_epsilon_from_ledger(another_run, 1e-5)]) == 1
  assert _shuffled_warnings(
      [lambda: analysis.compute_epsilon_from_ledger(export, 1e-5)] * 2) == 2
  fixed = _LedgerObject(ledger([sample(sampling="fixed_size")] * 7))
  assert _shuffled_warnings(
      [lambda: analysis.compute_epsilon_from_ledger(fixed, 1e-5)]) == 0


def test_the_warning_points_at_the_accounting_call():
  with pytest.warns(UserWarning, match="'shuffled' sampling") as caught:
    analysis.compute_epsilon_from_ledger(
        _LedgerObject(ledger([sample(sampling="shuffled")])), 1e-5)
  assert caught[0].filename == __file__
  with pytest.warns(UserWarning, match="'shuffled' sampling") as caught:
    analysis.compute_rdp_from_ledger(
        _LedgerObject(ledger([sample(sampling="shuffled")])), ORDERS)
  assert caught[0].filename == __file__


def test_shuffled_maps_to_dp_accounting_like_fixed_size():
  dp_accounting = pytest.importorskip("dp_accounting")
  with pytest.warns(UserWarning, match="shuffled"):
    events = analysis.to_dp_accounting_events(
        ledger([sample(sampling="shuffled", n=1000, q=0.01)] * 4))
  assert len(events) == 1 and events[0].count == 4
  inner = events[0].event
  assert isinstance(inner, dp_accounting.SampledWithoutReplacementDpEvent)
  assert (inner.source_dataset_size, inner.sample_size) == (1000, 10)
  assert inner.event.noise_multiplier == pytest.approx(1.1 / 2)


@pytest.mark.parametrize("text,match", [
    ('{"format": "tf_dp.privacy_ledger/1", "dropped_samples": 0, "samples": '
     '[{"population_size": 100, "sampling_probability": 0.1, "sampling": '
     '"bogus", "examples_per_record": 1, "sum_queries": []}]}',
     r"samples\[0\]\.sampling must be one of .*got 'bogus'"),
    ("{not json", r"not valid JSON"),
])
def test_bad_ledger_json_is_refused(text, match):
  with pytest.raises(ValueError, match=match):
    analysis.compute_rdp_from_ledger(text, ORDERS)


def user_sample(q=0.05, n=400, **kwargs):
  return dict(sample(q=q, n=n, **kwargs), privacy_unit="user")


@pytest.mark.parametrize("sampling", ["poisson", "fixed_size"])
def test_user_level_ledger_is_accounted_at_q_and_n_over_users(sampling):
  # q = 0.05 of n = 400 users, sigma 1.1, 30 lots: the accountant's epsilon
  # of that (q, sigma, steps), whatever the users' numbers of examples.
  data = ledger([user_sample(sampling=sampling)] * 30)
  if sampling == "poisson":
    expected = analysis.compute_rdp(0.05, 1.1, 30, ORDERS)
  else:
    expected = analysis.compute_rdp_fixed_size(0.05, 1.1, 30, ORDERS)
  np.testing.assert_allclose(analysis.compute_rdp_from_ledger(data, ORDERS),
                             expected)
  eps = analysis.compute_epsilon_from_ledger(data, 1e-5)[0]
  if sampling == "poisson":
    # compute_dp_sgd_privacy with n users and lots of 20 users: q = 0.05.
    assert eps == pytest.approx(analysis.compute_dp_sgd_privacy(
        n=400, batch_size=20, noise_multiplier=1.1, epochs=1.5, delta=1e-5)[0],
                                rel=1e-9)
  assert analysis.ledger_privacy_unit(data) == "user"
  events = analysis.ledger_events(data)
  assert {(e.privacy_unit, e.population_size) for e in events} == {
      ("user", 400)}


def test_a_ledger_mixing_privacy_units_is_refused():
  from tf_dp.errors import PrivacyError  # pylint: disable=g-import-not-at-top
  data = ledger([sample(), user_sample()])
  with pytest.raises(PrivacyError, match=r"mixes samples of privacy units "
                     r"\['example', 'user'\]"):
    analysis.compute_epsilon_from_ledger(data, 1e-5)


def test_epsilon_statement_names_the_unit():
  assert analysis.ledger_privacy_unit(ledger([sample()])) == "example"
  text = analysis.epsilon_statement(1.25, 1e-5, "user")
  assert text.startswith("(epsilon = 1.25, delta = 1e-05)-DP per user: ")
  assert "one user (all their examples)" in text
  assert "per example" in analysis.epsilon_statement(2.0, 1e-5)


def test_epsilon_statement_of_a_ledger_says_what_to_call():
  with pytest.raises(TypeError, match=r"takes epsilon as a number; got "
                     r"dict.*compute_epsilon_from_ledger"):
    analysis.epsilon_statement(ledger([sample()]), delta=1e-5)


def test_part_of_a_ledger_export_is_refused():
  """An export is read whole or refused: without its dropped-sample count
  (samples the ledger could not record), or as a correlated-noise run's
  samples without its record (each sample then releases nothing: epsilon
  0), no epsilon is computed."""
  whole = ledger([sample()] * 3)
  without_dropped = {k: v for k, v in whole.items() if k != "dropped_samples"}
  with pytest.raises(ValueError, match=r"missing \['dropped_samples'\]"):
    analysis.compute_epsilon_from_ledger(without_dropped, 1e-5)
  correlated_samples = ledger([sample(queries=())] * 3)
  with pytest.raises(ValueError, match="records no sum query.*'correlated_"
                     "noise'.*is missing from this export"):
    analysis.compute_epsilon_from_ledger(correlated_samples, 1e-5)
  with pytest.raises(ValueError, match="records no sum query"):
    analysis.compute_rdp_from_ledger(correlated_samples, ORDERS)
