"""Tests of tf_dp.analysis.pld_gaussian: closed-form privacy profiles.

References: the hockey-stick divergence E_P[(1 - e^{eps - L})_+] integrated
numerically over the output (scipy quad) for the Gaussian mixtures of the
module docstring; the analytic Gaussian mechanism (Balle & Wang 2018,
Thm. 8) at 60 digits (mpmath); the amplification identity of Balle, Barthe &
Gaboardi (2018) for the symmetric pair.
"""

import collections
import itertools
import math

import mpmath
import numpy as np
import pytest
from scipy import integrate
from scipy import stats

from tf_dp.analysis import pld_gaussian

# Pure Python accounting: one stack runs each case (tests/conftest.py).
pytestmark = pytest.mark.stack_independent


def analytic_gaussian_delta(eps, sigma):
  """Balle & Wang (2018), Thm. 8: delta(eps) of N(1, s^2) vs N(0, s^2)."""
  return float(stats.norm.cdf(-eps * sigma + 0.5 / sigma)
               - math.exp(eps) * stats.norm.cdf(-eps * sigma - 0.5 / sigma))


def gdp_delta_mpmath(epsilon, mu):
  """delta(epsilon) of mu-GDP at 60 digits."""
  with mpmath.workdps(60):
    eps, mu = mpmath.mpf(epsilon), mpmath.mpf(mu)
    return (mpmath.ncdf(mu / 2 - eps / mu)
            - mpmath.exp(eps) * mpmath.ncdf(-mu / 2 - eps / mu))


def hockey_stick(p_pdf, q_pdf, eps, sigma, sens):
  """E_P[(1 - e^eps Q/P)_+] = int (p - e^eps q)_+ do, by quadrature."""
  f = lambda o: max(p_pdf(o) - math.exp(eps) * q_pdf(o), 0.0)
  lo, hi = -12 * sigma, sens + 12 * sigma
  return integrate.quad(f, lo, hi, limit=400, epsabs=1e-13, epsrel=1e-10,
                        points=[0.0, sens])[0]


def mixture_pair(q, sigma, sens):
  base = lambda o: stats.norm.pdf(o, 0.0, sigma)
  mix = lambda o: ((1 - q) * stats.norm.pdf(o, 0.0, sigma)
                   + q * stats.norm.pdf(o, sens, sigma))
  return mix, base


@pytest.mark.parametrize("q,sigma,sens", [(0.1, 1.0, 1.0), (0.5, 0.7, 1.0),
                                          (0.02, 2.0, 2.0)])
@pytest.mark.parametrize("eps", [0.0, 0.05, 0.3, 1.0, 2.5])
def test_remove_and_add_profiles_match_quadrature(q, sigma, sens, eps):
  """Both orderings of the Poisson pair against the integral definition."""
  mix, base = mixture_pair(q, sigma, sens)
  remove = pld_gaussian.privacy_profile("remove", q, sigma, sens)
  add = pld_gaussian.privacy_profile("add", q, sigma, sens)
  assert remove(np.array([eps]))[0] == pytest.approx(
      hockey_stick(mix, base, eps, sigma, sens), rel=1e-7, abs=1e-12)
  assert add(np.array([eps]))[0] == pytest.approx(
      hockey_stick(base, mix, eps, sigma, sens), rel=1e-7, abs=1e-12)


def test_profiles_below_log_one_minus_q_are_one_minus_e_eps():
  """For eps <= log(1 - q) every loss of the remove pair exceeds eps, so
  delta = E_P[1 - e^{eps - L}] = 1 - e^eps exactly."""
  q = 0.3
  eps = np.array([math.log1p(-q) - 0.5, -2.0, -5.0])
  remove = pld_gaussian.privacy_profile("remove", q, 1.0, 1.0)
  np.testing.assert_allclose(remove(eps), -np.expm1(eps), rtol=1e-12)


@pytest.mark.parametrize("sigma", [0.5, 1.0, 3.0])
def test_without_sampling_every_direction_is_the_gaussian_mechanism(sigma):
  eps = np.array([0.0, 0.2, 1.0, 3.0])
  want = [analytic_gaussian_delta(e, sigma) for e in eps]
  for direction in ("remove", "add"):
    got = pld_gaussian.privacy_profile(direction, 1.0, sigma, 1.0)(eps)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-15)


def test_fixed_size_profile_is_amplified_gaussian():
  """The amplification identity (Balle, Barthe & Gaboardi 2018) behind the
  symmetric pair: delta'(log(1 + q (e^eps - 1))) = q delta(eps)."""
  q, sigma = 0.2, 1.0
  profile = pld_gaussian.privacy_profile("symmetric", q, sigma, 2.0)
  for eps in (0.5, 1.0, 3.0):
    base = analytic_gaussian_delta(eps, sigma / 2)  # sensitivity 2
    amplified = math.log1p(q * math.expm1(eps))
    assert profile(np.array([amplified]))[0] == pytest.approx(q * base,
                                                              rel=1e-9)


def test_symmetric_profile_satisfies_the_hockey_stick_identity():
  """H_a(P||Q) = 1 - a + a H_{1/a}(P||Q) for a symmetric pair: the value at
  -eps follows from the value at eps."""
  profile = pld_gaussian.privacy_profile("symmetric", 0.1, 1.5, 2.0)
  eps = np.array([0.1, 0.7, 2.0])
  np.testing.assert_allclose(
      profile(-eps), -np.expm1(-eps) + np.exp(-eps) * profile(eps),
      rtol=1e-12)
  assert np.all(np.diff(profile(np.linspace(-3, 3, 61))) <= 0)


@pytest.mark.parametrize("direction", ["remove", "add", "symmetric"])
def test_loss_range_leaves_at_most_tail_mass_above(direction):
  """P(L > eps_hi) <= tail_mass, with P the first distribution of the pair
  and L monotone in the output (direct normal tails)."""
  q, sigma, sens, tail = 0.05, 1.2, 1.0, 1e-10
  lo, hi = pld_gaussian.loss_range(direction, q, sigma, sens, tail)
  assert lo < 0 < hi
  if direction == "add":
    # P = N(0, s^2); L(o) = -log(1 - q + q e^{(2 o - 1) / (2 s^2)}) is
    # decreasing in o; L > hi is impossible (hi = -log(1 - q) is the sup).
    assert hi == pytest.approx(-math.log1p(-q))
    return
  # Remove-type pair at sensitivity sens: L(o) > hi iff o > o_hi.
  o_hi = sens + sigma * stats.norm.isf(tail)
  loss_at = math.log(1 - q + q * math.exp((2 * sens * o_hi - sens ** 2)
                                          / (2 * sigma ** 2)))
  assert hi == pytest.approx(loss_at, rel=1e-12)
  mass_above = ((1 - q) * stats.norm.sf(o_hi / sigma)
                + q * stats.norm.sf((o_hi - sens) / sigma))
  assert mass_above <= tail


@pytest.mark.parametrize("eps,mu", [(0.0, 0.5), (1.0, 1.0), (3.0, 2.0),
                                    (0.2, 0.05), (40.0, 5.0)])
def test_gaussian_dp_delta_is_a_tight_upper_bound(eps, mu):
  exact = float(gdp_delta_mpmath(eps, mu))
  got = pld_gaussian.gaussian_dp_delta(eps, mu)
  assert exact <= got <= exact * (1 + 1e-10) + 1e-300


@pytest.mark.parametrize("delta,mu", [(1e-5, 1.0), (1e-5, 20.0),
                                      (1e-3, 0.3), (1e-10, 2.0)])
def test_gaussian_dp_epsilon_is_the_smallest_valid_epsilon(delta, mu):
  eps = pld_gaussian.gaussian_dp_epsilon(delta, mu)
  assert gdp_delta_mpmath(eps, mu) <= delta
  assert gdp_delta_mpmath(eps * (1 - 1e-9), mu) > delta


def test_gaussian_dp_epsilon_is_zero_when_delta_covers_everything():
  mu = 0.01
  assert pld_gaussian.gaussian_dp_epsilon(
      pld_gaussian.gaussian_dp_delta(0.0, mu), mu) == 0.0


def test_unknown_direction_is_refused_by_name():
  with pytest.raises(ValueError, match="direction must be one of"):
    pld_gaussian.privacy_profile("replace", 0.1, 1.0, 1.0)


def _batch_sums(records, size):
  """Counts of the sums of every batch of ``size`` of ``records``."""
  return collections.Counter(
      sum(batch) for batch in itertools.combinations(records, size))


def _hockey_stick(p, q, eps, lo, hi, points):
  """H_{e^eps}(P || Q) of two densities on the line, by quadrature."""
  value, _ = integrate.quad(lambda o: max(0.0, p(o) - math.exp(eps) * q(o)),
                            lo, hi, points=points, limit=200, epsabs=1e-13)
  return value


def test_fixed_size_one_step_profile_is_attained():
  # D: n one-dimensional records at the clip norm (1.0); D': record 0
  # replaced by -1.0. A batch of b sums to b under D; under D' to b - 2 if
  # it holds record 0 (probability q = b / n), else to b. So (M(D'), M(D))
  # is the "remove" pair at sensitivity 2 (mirrored), and the accountant's
  # symmetrised profile is, at every eps, the larger of the two orderings'
  # profiles: each point of it is attained, so no dominating pair of one
  # step is smaller, and no fixed-size accountant may report less.
  n, b, sigma = 7, 3, 1.3
  q = b / n
  total = math.comb(n, b)
  assert _batch_sums([1.0] * n, b) == {b: total}
  sums = _batch_sums([-1.0] + [1.0] * (n - 1), b)
  assert set(sums) == {b - 2, b}
  assert sums[b - 2] / total == pytest.approx(q, rel=1e-12)
  m_d = lambda o: stats.norm.pdf(o, b, sigma)
  m_d_prime = lambda o: sum(count / total * stats.norm.pdf(o, mean, sigma)
                            for mean, count in sums.items())
  span = (b - 2 - 12 * sigma, b + 12 * sigma, [b - 2, b - 1, b])
  remove = pld_gaussian.privacy_profile("remove", q, sigma, 2.0)
  symmetric = pld_gaussian.privacy_profile("symmetric", q, sigma, 2.0)
  for eps in (-2.0, -1.0, -0.3, 0.0, 0.5, 1.0, 2.0):
    forward = _hockey_stick(m_d_prime, m_d, eps, *span)
    reverse = _hockey_stick(m_d, m_d_prime, eps, *span)
    eps_array = np.array([eps])
    assert forward == pytest.approx(remove(eps_array)[0], rel=1e-7)
    assert max(forward, reverse) == pytest.approx(symmetric(eps_array)[0],
                                                  rel=1e-7)
