"""Tests of RDP under fixed-size sampling without replacement (WBK 2019)."""

import numpy as np
import pytest

from tf_dp.analysis import compute_rdp
from tf_dp.analysis import compute_rdp_sample_without_replacement

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
                                       (60000, 600, 0.8)])
def test_matches_dp_accounting_at_small_sampling_ratio(n, m, sigma):
  # Where WBK's Theorem 27 refinement is inactive both use Theorem 9.
  ours = compute_rdp_sample_without_replacement(m / n, sigma, 1, ORDERS)
  np.testing.assert_allclose(ours, _oracle(n, m, sigma), rtol=1e-9)


@pytest.mark.parametrize("n,m,sigma", [(100, 50, 4.0), (100, 30, 1.0),
                                       (1000, 900, 2.0)])
def test_never_below_dp_accounting_at_large_sampling_ratio(n, m, sigma):
  # Theorem 9 only (no Theorem 27): at most ~20% above the oracle, and never
  # below it except where the oracle exceeds the base Gaussian's own RDP
  # (2 alpha / sigma^2), a cap that joint quasi-convexity of the Renyi
  # divergence proves (van Erven & Harremoes 2014, Thm. 13).
  ours = compute_rdp_sample_without_replacement(m / n, sigma, 1, ORDERS)
  theirs = _oracle(n, m, sigma)
  base = 2 * np.array(ORDERS) / sigma ** 2
  assert np.all(ours >= np.minimum(theirs, base) * (1 - 1e-9))
  assert np.all(ours <= theirs * 1.25)


def test_full_batch_is_base_gaussian_with_sensitivity_two_clip():
  np.testing.assert_allclose(
      compute_rdp_sample_without_replacement(1.0, 2.0, 5, ORDERS),
      5 * 2 * np.array(ORDERS) / 4.0)


def test_never_above_base_mechanism_and_monotone_in_q():
  prev = np.zeros(len(ORDERS))
  for q in [1e-3, 0.01, 0.1, 0.5, 1.0]:
    cur = compute_rdp_sample_without_replacement(q, 1.5, 1, ORDERS)
    assert np.all(cur <= 2 * np.array(ORDERS) / 1.5 ** 2 * (1 + 1e-12))
    assert np.all(cur >= prev)
    prev = cur


def test_costs_more_than_poisson_add_remove():
  # Replace-one at sensitivity 2C is a stronger adversary than add/remove.
  assert np.all(compute_rdp_sample_without_replacement(0.01, 1.1, 1, ORDERS)
                > compute_rdp(0.01, 1.1, 1, ORDERS))


def test_invalid_arguments():
  with pytest.raises(ValueError, match="noise_multiplier"):
    compute_rdp_sample_without_replacement(0.1, -1.0, 1)
  with pytest.raises(ValueError, match="q"):
    compute_rdp_sample_without_replacement(2.0, 1.0, 1)
