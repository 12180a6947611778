"""Tests of RDP under fixed-size sampling without replacement (WBK 2019)."""

import numpy as np
import pytest

from tf_dp.analysis import compute_rdp
from tf_dp.analysis import compute_rdp_fixed_size
from tf_dp.analysis import rdp_fixed_size

dp_accounting = pytest.importorskip("dp_accounting")

ORDERS = [1.5, 2.0, 3.0, 3.5, 8.0, 32.0, 128.0]


def _oracle(n, m, sigma):
  # dp_accounting's Gaussian noise is relative to the replace-one
  # sensitivity 2C, so its noise multiplier is sigma / 2.
  acc = dp_accounting.rdp.RdpAccountant(
      ORDERS, dp_accounting.NeighboringRelation.REPLACE_ONE)
  acc.compose(dp_accounting.SampledWithoutReplacementDpEvent(
      n, m, dp_accounting.GaussianDpEvent(sigma / 2)), 1)
  return np.asarray(acc._rdp)  # pylint: disable=protected-access


@pytest.mark.parametrize("n,m,sigma", [(1000, 10, 2.0), (60000, 256, 1.1),
                                       (60000, 600, 0.8), (10000, 100, 5.0),
                                       (60000, 256, 20.0)])
def test_matches_dp_accounting_at_small_sampling_ratio(n, m, sigma):
  # Both use Theorems 9 and 27 term by term; ~1e-14 apart in practice.
  ours = compute_rdp_fixed_size(m / n, sigma, 1, ORDERS)
  np.testing.assert_allclose(ours, _oracle(n, m, sigma), rtol=1e-9)


@pytest.mark.parametrize("n,m,sigma", [(100, 50, 4.0), (100, 30, 1.0),
                                       (1000, 900, 2.0), (100, 50, 0.6)])
def test_large_sampling_ratio_is_dp_accounting_capped_by_the_base(n, m,
                                                                  sigma):
  # Equal to the oracle except where the oracle exceeds the base Gaussian's
  # own RDP (2 alpha / sigma^2), a cap that joint quasi-convexity of the
  # Renyi divergence proves (van Erven & Harremoes 2014, Thm. 13).
  ours = compute_rdp_fixed_size(m / n, sigma, 1, ORDERS)
  base = 2 * np.array(ORDERS) / sigma ** 2
  np.testing.assert_allclose(ours, np.minimum(_oracle(n, m, sigma), base),
                             rtol=1e-9)


# TF Privacy's own test case (rdp_accountant_test): q = 0.01, noise 2.5 in
# its convention (relative to the replace-one sensitivity), 50 steps. That
# is noise_multiplier 5.0 here. Theorem 9 alone (this module before
# Theorem 27) gave these values, measured at commit 827d46c:
THEOREM9_ONLY = {2.5: 0.004680413043942818, 5.0: 0.00907954083229783,
                 50.0: 0.15401263312252025}


def test_tf_privacy_case_theorem_27_is_tighter_and_matches_the_reference():
  orders = sorted(THEOREM9_ONLY)
  acc = dp_accounting.rdp.RdpAccountant(
      orders, dp_accounting.NeighboringRelation.REPLACE_ONE)
  acc.compose(dp_accounting.SampledWithoutReplacementDpEvent(
      10000, 100, dp_accounting.GaussianDpEvent(2.5)), 50)
  reference = np.asarray(acc._rdp)  # pylint: disable=protected-access
  ours = compute_rdp_fixed_size(0.01, 5.0, 50, orders)
  old = np.array([THEOREM9_ONLY[a] for a in orders])
  # Tolerance 1e-9: both evaluate the same closed form in float64.
  np.testing.assert_allclose(ours, reference, rtol=1e-9)
  assert np.all(ours <= old)
  # The old overshoot, as documented: +0.9%, +3.6%, +56%.
  np.testing.assert_allclose(old / reference - 1, [0.009, 0.036, 0.564],
                             atol=0.001)


@pytest.mark.parametrize("mu", [0.02, 0.5, 8.0])
def test_pearson_vajda_moments_match_exact_forward_differences(mu):
  # X_m = sum_k C(m,k) (-1)^(m-k) e^{k(k-1) mu}, in 400-digit arithmetic
  # (the float64 sum cancels); tolerance 1e-11 relative.
  mpmath = pytest.importorskip("mpmath")
  # pylint: disable=protected-access
  log_chi = rdp_fixed_size._log_chi_moments(
      mu, rdp_fixed_size._MAX_TIGHT_MOMENT)
  with mpmath.workdps(400):
    for m in (2, 4, 10, 50, 100, 256):
      exact = mpmath.fsum(mpmath.binomial(m, k) * (-1) ** (m - k)
                          * mpmath.exp(k * (k - 1) * mpmath.mpf(mu))
                          for k in range(m + 1))
      assert log_chi[m] == pytest.approx(float(mpmath.log(exact)),
                                         rel=1e-11, abs=1e-11)


def test_theorem_27_never_above_theorem_9_alone():
  # Theorem 9 alone: the 2 e^{(j-1) eps(j)} terms, eps(j) = j mu.
  from scipy import special  # pylint: disable=g-import-not-at-top
  q, sigma = 0.05, 1.5
  mu = 2 / sigma ** 2
  for alpha in (2, 3, 8, 32, 100):
    j = np.arange(3, alpha + 1)
    terms = [0.0, 2 * np.log(q) + np.log(alpha * (alpha - 1) / 2)
             + min(np.log(4 * np.expm1(2 * mu)), np.log(2) + 2 * mu)]
    terms += list(np.log(2) + j * np.log(q) + special.gammaln(alpha + 1)
                  - special.gammaln(j + 1) - special.gammaln(alpha - j + 1)
                  + (j - 1) * j * mu)
    theorem9 = min(special.logsumexp(terms), alpha * (alpha - 1) * mu)
    ours = compute_rdp_fixed_size(q, sigma, 1, [alpha])[0]
    assert ours * (alpha - 1) <= theorem9 * (1 + 1e-12)


def test_full_batch_is_base_gaussian_with_sensitivity_two_clip():
  np.testing.assert_allclose(
      compute_rdp_fixed_size(1.0, 2.0, 5, ORDERS),
      5 * 2 * np.array(ORDERS) / 4.0)


def test_never_above_base_mechanism_and_monotone_in_q():
  prev = np.zeros(len(ORDERS))
  for q in [1e-3, 0.01, 0.1, 0.5, 1.0]:
    cur = compute_rdp_fixed_size(q, 1.5, 1, ORDERS)
    assert np.all(cur <= 2 * np.array(ORDERS) / 1.5 ** 2 * (1 + 1e-12))
    assert np.all(cur >= prev)
    prev = cur


def test_costs_more_than_poisson_add_remove():
  # Replace-one at sensitivity 2C is a stronger adversary than add/remove.
  assert np.all(compute_rdp_fixed_size(0.01, 1.1, 1, ORDERS)
                > compute_rdp(0.01, 1.1, 1, ORDERS))


def test_invalid_arguments():
  with pytest.raises(ValueError, match="noise_multiplier"):
    compute_rdp_fixed_size(0.1, -1.0, 1)
  with pytest.raises(ValueError, match="q"):
    compute_rdp_fixed_size(2.0, 1.0, 1)
