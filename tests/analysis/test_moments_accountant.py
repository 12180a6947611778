"""Tests of Abadi et al.'s moments accountant by numerical integration."""

import numpy as np
import pytest

from tf_dp.analysis import compute_rdp
from tf_dp.analysis import get_privacy_spent
from tf_dp.analysis import log_moment
from tf_dp.analysis import moments_accountant_epsilon


def test_reproduces_abadi_example():
  eps, lam = moments_accountant_epsilon(0.01, 4.0, 10000, 1e-5)
  assert eps == pytest.approx(1.26, abs=0.005)
  assert 1 <= lam <= 64


@pytest.mark.parametrize("q,sigma", [(0.01, 4.0), (0.05, 1.0), (0.3, 2.0)])
def test_log_moment_equals_rdp_times_order(q, sigma):
  # alpha(lambda) = lambda * RDP(lambda + 1) (Mironov 2017, Prop. 5).
  for lam in [1, 4, 16]:
    expected = lam * compute_rdp(q, sigma, 1, [lam + 1])[0]
    assert log_moment(q, sigma, lam) == pytest.approx(expected, rel=1e-7)


def test_agrees_with_classic_rdp_conversion():
  orders = np.arange(2, 66, dtype=float)
  rdp = compute_rdp(0.02, 1.5, 2000, orders)
  classic = get_privacy_spent(orders, rdp, target_delta=1e-6,
                              conversion="classic")[0]
  eps, _ = moments_accountant_epsilon(0.02, 1.5, 2000, 1e-6, max_lambda=64)
  assert eps == pytest.approx(classic, rel=1e-6)


def test_no_sampling_costs_nothing():
  assert log_moment(0.0, 1.0, 5) == 0.0
