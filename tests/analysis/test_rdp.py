"""Tests of the Poisson-subsampled Gaussian RDP against exact references."""

import math
import warnings

import mpmath
import numpy as np
import pytest

from tf_dp.analysis import DEFAULT_ORDERS
from tf_dp.analysis import compute_heterogeneous_rdp
from tf_dp.analysis import compute_rdp

# Pure Python accounting: one stack runs each case (tests/conftest.py).
pytestmark = pytest.mark.stack_independent

dp_accounting = pytest.importorskip("dp_accounting")


def exact_rdp(q, sigma, alpha, dps=50):
  """RDP by mpmath integration of E_{mu0}[(mu/mu0)^alpha] (50 digits)."""
  with mpmath.workdps(dps):
    q, s, a = mpmath.mpf(q), mpmath.mpf(sigma), mpmath.mpf(alpha)
    f = lambda z: mpmath.npdf(z, 0, s) * (
        (1 - q) + q * mpmath.exp((2 * z - 1) / (2 * s * s))) ** a
    z0 = s * s * mpmath.log(1 / q - 1) + mpmath.mpf(1) / 2
    pts = sorted({-mpmath.inf, -12 * s, 0, z0, a, a + 12 * s, mpmath.inf})
    return float(mpmath.log(mpmath.quad(f, pts)) / (a - 1))


def oracle_rdp(q, sigma, orders):
  acc = dp_accounting.rdp.RdpAccountant(
      list(orders), dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
  acc.compose(dp_accounting.PoissonSampledDpEvent(
      q, dp_accounting.GaussianDpEvent(sigma)), 1)
  return np.asarray(acc._rdp)  # pylint: disable=protected-access


@pytest.mark.parametrize("q", [1e-4, 0.01, 0.2, 0.9])
@pytest.mark.parametrize("sigma", [0.5, 1.0, 5.0, 100.0])
@pytest.mark.parametrize("alpha", [1.1, 1.25, 1.5, 2.5, 4.5])
def test_fractional_orders_match_exact_integral(q, sigma, alpha):
  # Tolerance 1e-6 relative, as the accounting spec requires.
  ours = compute_rdp(q, sigma, 1, [alpha])[0]
  assert ours == pytest.approx(exact_rdp(q, sigma, alpha), rel=1e-6)


@pytest.mark.parametrize("q,sigma,alpha", [(0.5, 0.1, 1.5), (0.01, 0.2, 3.5),
                                           (0.999, 0.3, 2.5),
                                           (1e-3, 1000.0, 1.25)])
def test_fractional_orders_extreme_parameters(q, sigma, alpha):
  ours = compute_rdp(q, sigma, 1, [alpha])[0]
  assert ours == pytest.approx(exact_rdp(q, sigma, alpha, dps=80), rel=1e-6)


@pytest.mark.parametrize("q", [1e-3, 0.01, 0.1, 0.5])
@pytest.mark.parametrize("sigma", [0.7, 1.1, 4.0, 20.0])
def test_integer_orders_match_dp_accounting(q, sigma):
  orders = [2, 3, 5, 8, 16, 32, 64, 256]
  np.testing.assert_allclose(compute_rdp(q, sigma, 1, orders),
                             oracle_rdp(q, sigma, orders), rtol=1e-9)


def test_dp_accounting_overestimates_fractional_orders():
  # The published fact: its series loses the sign of the generalised
  # binomial coefficient; at order 1.25, q=0.2, sigma=5 it is ~5x too big.
  ours = compute_rdp(0.2, 5.0, 1, [1.25])[0]
  theirs = oracle_rdp(0.2, 5.0, [1.25])[0]
  assert ours == pytest.approx(exact_rdp(0.2, 5.0, 1.25), rel=1e-6)
  assert theirs / ours > 4.5


@pytest.mark.parametrize("q", [1e-3, 0.05, 0.3])
@pytest.mark.parametrize("sigma", [0.8, 2.0, 10.0])
def test_never_above_dp_accounting_upper_bound(q, sigma):
  orders = [1.1, 1.5, 1.75, 2.5, 3.5, 4.5]
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    theirs = oracle_rdp(q, sigma, orders)
  ours = compute_rdp(q, sigma, 1, orders)
  assert np.all(ours <= theirs * (1 + 1e-9))


def test_closed_forms_at_boundaries():
  orders = [1.5, 2.0, 32.0, math.inf]
  np.testing.assert_array_equal(compute_rdp(0.0, 1.0, 10, orders), 0.0)
  full = compute_rdp(1.0, 2.0, 3, orders)
  np.testing.assert_allclose(full[:3], 3 * np.array(orders[:3]) / 8.0)
  assert full[3] == math.inf
  assert compute_rdp(0.01, 1.0, 1, [math.inf])[0] == math.inf


def test_linear_in_steps_and_zero_steps():
  one = compute_rdp(0.01, 1.1, 1)
  np.testing.assert_allclose(compute_rdp(0.01, 1.1, 1000), 1000 * one,
                             rtol=1e-12)
  np.testing.assert_array_equal(compute_rdp(0.01, 1.1, 0), 0.0)


@pytest.mark.parametrize("q", [0.0, 1e-6, 0.01, 0.5, 1 - 1e-9, 1.0])
@pytest.mark.parametrize("sigma", [0.1, 1.0, 1000.0])
def test_stable_over_whole_domain(q, sigma):
  orders = list(DEFAULT_ORDERS) + [math.inf]
  rdp = compute_rdp(q, sigma, 1, orders)
  finite = rdp[:-1]
  assert np.all(np.isfinite(finite)) and np.all(finite >= 0)
  # RDP is non-decreasing in the order (Van Erven & Harremoes 2014).
  assert np.all(np.diff(finite) >= -1e-12 * np.abs(finite[1:]))


def test_monotone_in_sampling_probability():
  qs = [1e-4, 1e-3, 0.01, 0.1, 0.5, 0.9, 1.0]
  values = np.array([compute_rdp(q, 1.3, 1, [1.5, 8, 64]) for q in qs])
  assert np.all(np.diff(values, axis=0) > 0)


def test_heterogeneous_is_sum_of_parts():
  orders = [1.5, 2, 10, 100]
  events = [(0.01, 1.0, 10), (0.02, 2.0, 5), (0.01, 1.0, 3), (0.5, 3.0, 1)]
  expected = sum(compute_rdp(q, s, n, orders) for q, s, n in events)
  np.testing.assert_allclose(compute_heterogeneous_rdp(events, orders),
                             expected, rtol=1e-12)


@pytest.mark.parametrize("kwargs,name", [
    (dict(sampling_probability=1.5, noise_multiplier=1.0, steps=1), "sampling_probability"),
    (dict(sampling_probability=-0.1, noise_multiplier=1.0, steps=1), "sampling_probability"),
    (dict(sampling_probability=0.1, noise_multiplier=0.0, steps=1), "noise_multiplier"),
    (dict(sampling_probability=0.1, noise_multiplier=-1.0, steps=1), "noise_multiplier"),
    (dict(sampling_probability=0.1, noise_multiplier=1.0, steps=-1), "steps"),
    (dict(sampling_probability=0.1, noise_multiplier=1.0, steps=1, orders=[]), "orders"),
    (dict(sampling_probability=0.1, noise_multiplier=1.0, steps=1, orders=[0.5]), "orders"),
])
def test_invalid_arguments_name_the_argument(kwargs, name):
  with pytest.raises(ValueError, match=name):
    compute_rdp(**kwargs)
