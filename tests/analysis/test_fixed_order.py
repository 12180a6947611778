"""Fixed-order lots are accounted as passes, without amplification
(``tf_dp.analysis.fixed_order``): each pass one Gaussian mechanism of
sensitivity 2C (replace-one) per example, the passes composed."""

import math

import numpy as np
import pytest
from scipy import stats

from tf_dp import analysis
from tf_dp.analysis import fixed_order
from tf_dp.analysis.ledger import LedgerEvent

pytestmark = pytest.mark.stack_independent
INF = math.inf


def ordered(q, sigma, n=1000):
  return LedgerEvent("fixed_order", q, sigma, n, 1)


def ledger(runs, n=1000):
  """A version-2 ledger export of (sampling, q, sigma or None, count) runs
  (None: a lot that released nothing)."""
  return {"format": "tf_dp.privacy_ledger/2", "dropped_samples": 0,
          "runs": [{"population_size": n, "sampling_probability": q,
                    "sampling": sampling, "examples_per_record": 1,
                    "sum_queries": [] if sigma is None else [
                        {"l2_norm_clip": 1.0, "noise_stddev": sigma}],
                    "count": count} for sampling, q, sigma, count in runs]}


def gaussian_epsilon(mu, delta):
  """The exact epsilon of mu-GDP at delta, by bisection on the closed-form
  delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2) (Dong, Roth
  & Su 2022, Cor. 2.13), written here independently of the package."""
  def delta_of(eps):
    return (stats.norm.cdf(-eps / mu + mu / 2)
            - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2))
  lo, hi = 0.0, 100.0
  for _ in range(200):
    mid = (lo + hi) / 2
    lo, hi = (mid, hi) if delta_of(mid) > delta else (lo, mid)
  return hi


@pytest.mark.parametrize("sigma,passes", [(4.0, 1), (1.1, 3), (2.0, 10)])
def test_rdp_is_that_of_one_gaussian_mechanism_of_sensitivity_2c_per_pass(
    sigma, passes):
  """Replace-one: the replaced example's lot moves by 2C, so RDP at order
  alpha is alpha (2C)^2 / (2 sigma^2 C^2) = 2 alpha / sigma^2 per pass."""
  orders = [1.5, 2.0, 8.0, 64.0]
  lots_per_pass = 100
  data = ledger([("fixed_order", 0.01, sigma, lots_per_pass * passes)])
  expected = 2 * np.array(orders) * passes / sigma ** 2
  np.testing.assert_allclose(
      analysis.compute_rdp_from_ledger(data, orders), expected, rtol=1e-12)
  np.testing.assert_allclose(
      fixed_order.fixed_order_rdp(sigma, passes, orders), expected,
      rtol=1e-12)


@pytest.mark.parametrize("sigma,passes", [(4.0, 1), (1.1, 3), (2.0, 10)])
def test_pld_epsilon_is_the_gaussian_mechanisms_exactly(sigma, passes):
  """P passes of noise sigma are mu = 2 sqrt(P) / sigma GDP; PLD gives that
  epsilon (to 1e-9 against an independent bisection)."""
  expected = gaussian_epsilon(2 * math.sqrt(passes) / sigma, 1e-5)
  data = ledger([("fixed_order", 0.01, sigma, 100 * passes)])
  assert analysis.compute_epsilon_from_ledger(data, 1e-5)[0] == (
      pytest.approx(expected, rel=1e-9))
  assert fixed_order.fixed_order_epsilon(sigma, passes, 1e-5) == (
      pytest.approx(expected, rel=1e-9))
  # RDP is an upper bound on the same mechanism, never below it.
  rdp = analysis.compute_epsilon_from_ledger(data, 1e-5, accountant="rdp")[0]
  assert expected < rdp < 1.2 * expected


@pytest.mark.parametrize("n,batch,sigma,epochs,shuffled,fixed", [
    (1000, 10, 4.0, 1, 0.2092, 1.9931),
    (60000, 256, 1.1, 3, 4.9367, 17.7603)])
def test_a_fixed_order_costs_what_the_commit_log_measured(
    n, batch, sigma, epochs, shuffled, fixed):
  """The figures of the fixed-order warning: the same lots recorded as
  shuffled give the small epsilon, recorded as fixed-order the large one
  (n = 60000, B = 256: 234 full lots and one of 96 per pass, 4.937 where
  the log rounded 705 full lots to 4.94)."""
  full, rest = divmod(n, batch)
  runs = []
  for _ in range(epochs):
    runs.append(("fixed_order", batch / n, sigma, full))
    if rest:
      runs.append(("fixed_order", rest / n, sigma, 1))
  eps = analysis.compute_epsilon_from_ledger(ledger(runs, n), 1e-5)[0]
  assert eps == pytest.approx(fixed, abs=1e-4)
  assert eps == pytest.approx(gaussian_epsilon(
      2 * math.sqrt(epochs) / sigma, 1e-5), rel=1e-9)
  with pytest.warns(UserWarning, match="shuffled"):
    recorded = analysis.compute_epsilon_from_ledger(ledger(
        [("shuffled",) + r[1:] for r in runs], n), 1e-5)[0]
  assert recorded == pytest.approx(shuffled, abs=1e-4)


def test_a_partial_pass_counts_as_a_whole_one():
  """An example of the first lots is in 3 passes after 2.5 passes' lots."""
  assert fixed_order.pass_runs([(ordered(0.01, 4.0), 250)]) == [
      (ordered(1.0, 4.0)._replace(sampling="fixed_size"), 3)]


def test_a_lot_that_released_nothing_closes_a_pass_without_cost():
  """50 lots, a lot of the 500 missing examples with no query (the order
  restarted), then a full pass: two passes, not one and a half."""
  runs = [(ordered(0.01, 4.0), 50), (ordered(0.5, INF), 1),
          (ordered(0.01, 4.0), 100)]
  assert fixed_order.pass_runs(runs) == [
      (ordered(1.0, 4.0)._replace(sampling="fixed_size"), 2)]
  assert fixed_order.open_pass(runs[:1]) == (500, ordered(0.01, 4.0))
  assert fixed_order.open_pass(runs)[0] == 0
  eps = analysis.compute_epsilon_from_ledger(ledger(
      [("fixed_order", 0.01, 4.0, 50), ("fixed_order", 0.5, None, 1),
       ("fixed_order", 0.01, 4.0, 100)]), 1e-5)[0]
  assert eps == pytest.approx(gaussian_epsilon(2 * math.sqrt(2) / 4.0, 1e-5),
                              rel=1e-9)


def test_a_pass_is_charged_its_smallest_noise_multiplier():
  """Lots of sigma 4 then 2 in one pass: the example in the sigma-2 lot is
  the worst; the next pass (all sigma 2) costs the same."""
  runs = [(ordered(0.01, 4.0), 50), (ordered(0.01, 2.0), 150)]
  assert fixed_order.pass_runs(runs) == [
      (ordered(1.0, 2.0)._replace(sampling="fixed_size"), 2)]


def test_other_kinds_pass_through_and_compose():
  poisson = LedgerEvent("poisson", 0.01, 1.0, 1000, 1)
  runs = [(ordered(0.01, 4.0), 100), (poisson, 300)]
  assert fixed_order.pass_runs(runs) == [
      (poisson, 300), (ordered(1.0, 4.0)._replace(sampling="fixed_size"), 1)]
  both = analysis.compute_epsilon_from_ledger(ledger(
      [("fixed_order", 0.01, 4.0, 100), ("poisson", 0.01, 1.0, 300)]), 1e-5)[0]
  alone = analysis.compute_epsilon_from_ledger(ledger(
      [("poisson", 0.01, 1.0, 300)]), 1e-5)[0]
  assert both > max(alone, fixed_order.fixed_order_epsilon(4.0, 1, 1e-5))


def test_no_pass_and_infinite_noise_cost_nothing():
  assert fixed_order.fixed_order_epsilon(4.0, 0, 1e-5) == 0.0
  assert fixed_order.fixed_order_epsilon(INF, 3, 1e-5) == 0.0
  assert fixed_order.fixed_order_epsilon(0.0, 1, 1e-5) == INF
  assert not np.any(fixed_order.fixed_order_rdp(INF, 3))


def test_the_dp_accounting_events_are_one_gaussian_per_pass():
  dp_accounting = pytest.importorskip("dp_accounting")
  events = analysis.to_dp_accounting_events(ledger(
      [("fixed_order", 0.01, 4.0, 300)]))
  assert events == [dp_accounting.SelfComposedDpEvent(
      dp_accounting.GaussianDpEvent(2.0), 3)]
