"""Hostile arguments: exact values at the edges of the domain, else ValueError.

Each case used to give NaN, a ``ZeroDivisionError``/``OverflowError`` or a
silently wrong number. Now it gives the exact value (checked against an
independent reference), the right limit, or a ``ValueError`` that names the
argument.
"""

import json
import math
import warnings

import mpmath
import numpy as np
import pytest

from tf_dp import analysis
from tf_dp.analysis import checks

# Pure Python accounting: one stack runs each case (tests/conftest.py).
pytestmark = pytest.mark.stack_independent


def exact_rdp(q, sigma, alpha, dps=50):
  """RDP by mpmath integration of E_{mu0}[(mu/mu0)^alpha] (50 digits).

  Independent of the library's log-space trapezoid rule: adaptive
  tanh-sinh quadrature in arbitrary precision, split at both bumps.
  """
  with mpmath.workdps(dps):
    q, s, a = mpmath.mpf(q), mpmath.mpf(sigma), mpmath.mpf(alpha)
    f = lambda z: mpmath.npdf(z, 0, s) * (
        (1 - q) + q * mpmath.exp((2 * z - 1) / (2 * s * s))) ** a
    z0 = s * s * mpmath.log(1 / q - 1) + mpmath.mpf(1) / 2
    pts = sorted({-mpmath.inf, -12 * s, 0, z0, a - 12 * s, a, a + 12 * s,
                  mpmath.inf})
    return float(mpmath.log(mpmath.quad(f, pts)) / (a - 1))


# --- Large alpha / sigma^2 at fractional orders (overflowed to NaN). ---


@pytest.mark.parametrize("q,sigma,alpha", [
    (1e-5, 0.1, 256.1), (1e-5, 0.5, 256.1), (1e-5, 0.5, 512.5),
    (1e-5, 1.0, 1000.5), (0.5, 0.1, 1023.5)])
def test_large_fractional_orders_match_mpmath(q, sigma, alpha):
  # Tolerance 1e-9 relative: the values are large (up to 5e4) and the
  # log-space quadrature keeps ~12 digits.
  ours = analysis.compute_rdp(q, sigma, 1, [alpha])[0]
  assert ours == pytest.approx(exact_rdp(q, sigma, alpha), rel=1e-9)


def test_order_256_1_at_sigma_0_1_value_and_bracket():
  # Leading order: alpha / (2 s^2) + alpha log(q) / (alpha - 1)
  # = 12805 - 11.558 = 12793.44; the mpmath integral agrees to 12 digits.
  ours = analysis.compute_rdp(1e-5, 0.1, 1, [256.0, 256.1, 257.0])
  assert ours[1] == pytest.approx(12793.4419435, abs=1e-6)
  # RDP is non-decreasing in the order; integer orders are exact sums.
  assert ours[0] < ours[1] < ours[2]


# --- Small noise multipliers (NaN below sigma ~ 0.06 at order 4.5). ---


@pytest.mark.parametrize("q,sigma,alpha", [
    (0.01, 0.05, 1.1), (0.01, 0.02, 2.5), (0.5, 0.01, 4.5),
    (1e-3, 0.003, 1.5)])
def test_small_noise_fractional_orders_match_mpmath(q, sigma, alpha):
  ours = analysis.compute_rdp(q, sigma, 1, [alpha])[0]
  assert ours == pytest.approx(exact_rdp(q, sigma, alpha, dps=80), rel=1e-9)


@pytest.mark.parametrize("sigma", [0.05, 0.01])
def test_small_noise_default_orders_are_finite_and_give_epsilon(sigma):
  rdp = analysis.compute_rdp(0.01, sigma, 100)
  assert np.all(np.isfinite(rdp)) and np.all(np.diff(rdp) >= 0)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)  # optimum at an edge
    eps, _, _ = analysis.get_privacy_spent(analysis.DEFAULT_ORDERS, rdp,
                                           target_delta=1e-5)
  # Smallest order 1.1: eps ~ RDP(1.1) + conversion terms, finite and huge.
  assert math.isfinite(eps) and eps > rdp[0]


def test_too_small_noise_for_fractional_quadrature_names_the_fix():
  with pytest.raises(ValueError,
                     match=r"fractional order 3\.5.*noise_multiplier=0\.002"
                     r".*integer orders"):
    analysis.compute_rdp(0.01, 0.002, 1)
  # Integer orders stay exact there; the top binomial term q^a e^(a(a-1)/
  # (2 s^2)) dominates the others by a factor over e^(1/s^2) = e^250000.
  rdp = analysis.compute_rdp(0.01, 0.002, 1, [2, 3])
  np.testing.assert_allclose(
      rdp, [math.log(0.01 ** 2) + 1 / 0.002 ** 2,
            (math.log(0.01 ** 3) + 3 / 0.002 ** 2) / 2], rtol=1e-12)


# --- Infinite noise, zero sampling: the right limit, epsilon 0. ---


def test_infinite_noise_releases_nothing():
  orders = [1.5, 2.0, 32.0, 64.5]
  np.testing.assert_array_equal(
      analysis.compute_rdp(0.01, math.inf, 10, orders), 0.0)
  np.testing.assert_array_equal(
      analysis.compute_heterogeneous_rdp(
          [(0.01, math.inf, 10), (0.5, math.inf, 1)], orders), 0.0)
  np.testing.assert_array_equal(
      analysis.compute_rdp_fixed_size(0.01, math.inf, 10,
                                                      orders), 0.0)
  assert analysis.compute_dp_sgd_privacy(60000, 256, math.inf, 1,
                                         1e-5)[0] == 0.0
  assert analysis.strong_composition_dp_sgd_epsilon(0.01, math.inf, 100,
                                                    1e-5) == 0.0


def test_zero_rdp_converts_to_zero_epsilon_and_delta():
  eps, _, _ = analysis.get_privacy_spent([2.0, 8.0], [0.0, 0.0],
                                         target_delta=1e-5)
  assert eps == 0.0
  _, delta, _ = analysis.get_privacy_spent([2.0, 8.0], [0.0, 0.0],
                                           target_eps=0.0)
  assert delta == 0.0


def test_strong_composition_zero_sampling_is_free():
  assert analysis.strong_composition_dp_sgd_epsilon(0.0, 4.0, 100,
                                                    1e-5) == 0.0
  with pytest.raises(ValueError, match="noise_multiplier"):
    analysis.strong_composition_dp_sgd_epsilon(0.01, 0.0, 100, 1e-5)


def test_amplification_in_log_space_does_not_overflow():
  eps, delta = analysis.amplify_by_poisson_sampling(1000.0, 0.0, 0.01)
  assert eps == pytest.approx(1000.0 + math.log(0.01), rel=1e-12)
  assert analysis.amplify_by_poisson_sampling(math.inf, 0.0, 0.0) == (0.0,
                                                                      0.0)
  # Small q: log1p(q (e^eps - 1)) to full precision (no cancellation).
  eps, _ = analysis.amplify_by_poisson_sampling(1.5, 0.0, 1e-10)
  assert eps == pytest.approx(math.log1p(1e-10 * math.expm1(1.5)),
                              rel=1e-14)
  assert analysis.advanced_composition(1000.0, 0.0, 3, 1e-5)[0] == math.inf
  assert analysis.advanced_composition(math.inf, 0.0, 0, 1e-5) == (0.0, 1e-5)


# --- Silent nonsense before: now a ValueError naming the argument. ---


_BOGUS_LEDGER_JSON = json.dumps({
    "format": "tf_dp.privacy_ledger/1", "dropped_samples": 0,
    "samples": [{"population_size": 100, "sampling_probability": 0.1,
                 "sampling": "bogus", "examples_per_record": 1,
                 "sum_queries": [{"l2_norm_clip": 1.0, "noise_stddev": 1.0}]}]})


@pytest.mark.parametrize("call,name", [
    (lambda: analysis.amplify_by_poisson_sampling(1.0, -1.0, 0.01), "delta"),
    (lambda: analysis.amplify_by_poisson_sampling(1.0, math.nan, 0.01),
     "delta"),
    (lambda: analysis.amplify_by_poisson_sampling(1.0, 1e-5, True), "q"),
    (lambda: analysis.compute_rdp(True, 1.0, 1, [2.0]), "q"),
    (lambda: analysis.compute_rdp(0.01, 1.0, 1, [1e6 + 0.5]), "orders"),
    (lambda: analysis.compute_rdp(0.01, 1.0, 1, [2.0, math.nan]), "orders"),
    (lambda: analysis.compute_rdp(0.01, 1.0, 1, ["two"]), "orders"),
    (lambda: analysis.compute_rdp(0.01, 1.0, 1, [True]), "orders"),
    (lambda: analysis.compute_rdp(0.01, 0.1, 1, [20000.5]), "orders"),
    (lambda: analysis.compute_rdp(0.01, 1.0, math.inf, [2.0]), "steps"),
    (lambda: analysis.compute_rdp_fixed_size(
        0.01, 1.0, 1, [1e6 + 0.5]), "orders"),
    (lambda: analysis.advanced_composition(0.1, math.nan, 10, 1e-5), "delta"),
    (lambda: analysis.gaussian_mechanism_noise_multiplier(math.nan, 1e-5),
     "epsilon"),
    (lambda: analysis.gaussian_zcdp(math.nan, 1.0), "sensitivity"),
    (lambda: analysis.zcdp_to_dp_epsilon(math.nan, 1e-5), "rho"),
    (lambda: analysis.get_privacy_spent([2.0], [1.0], target_delta=True),
     "target_delta"),
    (lambda: analysis.compute_epsilon_from_ledger(_BOGUS_LEDGER_JSON, 1e-5),
     r"samples\[0\]\.sampling"),
    (lambda: analysis.compute_heterogeneous_rdp([(0.01, 1.0)], [2.0]),
     "events"),
    (lambda: analysis.get_privacy_spent([2.0], ["x"], target_delta=1e-5),
     "rdp"),
    (lambda: analysis.get_privacy_spent([2.0], [1.0], target_delta=1e-5,
                                        conversion=["tight"]), "conversion"),
])
def test_value_error_names_the_argument(call, name):
  with pytest.raises(ValueError, match=rf"\b{name}\b"):
    call()


# --- Helpers for checks that calibration / dp_sgd_privacy must call. ---


def test_check_dataset_and_epochs_helpers():
  with pytest.raises(ValueError, match=r"n must be an integer >= 1; got 0"):
    checks.check_dataset(0, 256)
  with pytest.raises(ValueError, match=r"batch_size must not exceed.*n=10"):
    checks.check_dataset(10, 256)
  assert checks.check_dataset(60000, 256) == (60000, 256)
  for bad in (math.inf, math.nan, 0.0, -1.0, True):
    with pytest.raises(ValueError, match=r"epochs must be a finite real"):
      checks.check_epochs("epochs", bad)
  assert checks.check_epochs("epochs", 2.5) == 2.5


def test_compute_epochs_refuses_empty_dataset():
  with pytest.raises(ValueError, match=r"\bn\b"):
    analysis.compute_epochs(0, 256, 1.1, 1.0, 1e-5)


def test_infinite_epochs_are_refused():
  with pytest.raises(ValueError, match=r"\bepochs\b"):
    analysis.compute_dp_sgd_privacy(60000, 256, 1.1, math.inf, 1e-5)


def test_zero_steps_cost_nothing_even_at_order_inf():
  # inf * 0 used to give NaN at order inf.
  orders = [2.0, 2.5, math.inf]
  np.testing.assert_array_equal(analysis.compute_rdp(0.01, 1.0, 0, orders),
                                0.0)
  np.testing.assert_array_equal(
      analysis.compute_rdp_fixed_size(0.01, 1.0, 0, orders),
      0.0)
