"""Calibration under both accountants (PLD default, RDP on request)."""

import math

import pytest

from tf_dp import analysis

N, DELTA = 60000, 1e-5


def eps(batch, z, epochs, accountant):
  return analysis.compute_dp_sgd_privacy(N, batch, z, epochs, DELTA,
                                         accountant=accountant)[0]


@pytest.mark.parametrize("tolerance", [0, 0.0, -1e-3, math.nan, 1.5])
def test_bad_tolerance_is_an_error_not_a_hang(tolerance):
  with pytest.raises(ValueError, match="tolerance"):
    analysis.compute_noise_multiplier(N, 256, 3.0, 60, DELTA,
                                      tolerance=tolerance)


@pytest.mark.parametrize("accountant", ["pld", "rdp"])
def test_noise_multiplier_is_tight_and_conservative(accountant):
  z = analysis.compute_noise_multiplier(N, 256, 2.0, 30, DELTA,
                                        accountant=accountant)
  assert eps(256, z, 30, accountant) <= 2.0
  assert eps(256, z * (1 - 2e-3), 30, accountant) > 2.0


def test_pld_needs_less_noise_than_rdp():
  pld = analysis.compute_noise_multiplier(N, 256, 2.0, 30, DELTA)
  rdp = analysis.compute_noise_multiplier(N, 256, 2.0, 30, DELTA,
                                          accountant="rdp")
  assert pld < rdp * 0.97  # RDP is looser by several percent here.


def test_epochs_and_batch_size_with_pld():
  epochs, steps = analysis.compute_epochs(N, 256, 1.1, 1.0, DELTA,
                                          accountant="pld")
  assert steps > 0 and epochs == pytest.approx(steps * 256 / N)
  assert eps(256, 1.1, epochs, "pld") <= 1.0
  assert eps(256, 1.1, (steps + 1) * 256 / N, "pld") > 1.0
  rdp_epochs, _ = analysis.compute_epochs(N, 256, 1.1, 1.0, DELTA,
                                          accountant="rdp")
  assert epochs > rdp_epochs
  b = analysis.compute_batch_size(N, 1.0, 1.0, 5, DELTA, accountant="pld")
  assert 1 < b < N
  assert eps(b, 1.0, 5, "pld") <= 1.0 < eps(b + 1, 1.0, 5, "pld")


def test_accountant_selection():
  default, order = analysis.compute_dp_sgd_privacy(N, 256, 1.1, 60, DELTA)
  explicit, _ = analysis.compute_dp_sgd_privacy(N, 256, 1.1, 60, DELTA,
                                                accountant="pld")
  assert default == explicit and math.isnan(order)
  # RDP-only options select RDP when no accountant is named.
  rdp, rdp_order = analysis.compute_dp_sgd_privacy(N, 256, 1.1, 60, DELTA,
                                                   conversion="tight")
  assert rdp > default and rdp_order > 1
  with pytest.raises(ValueError, match="conversion"):
    analysis.compute_dp_sgd_privacy(N, 256, 1.1, 60, DELTA,
                                    conversion="classic", accountant="pld")
  with pytest.raises(ValueError, match="accountant"):
    analysis.compute_dp_sgd_privacy(N, 256, 1.1, 60, DELTA,
                                    accountant="moments")
