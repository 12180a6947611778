"""The command line ``tf_dp-compute-dp-sgd-privacy`` prints the epsilon of
``tf_dp.analysis.compute_dp_sgd_privacy``."""

import subprocess
import sys

import pytest

from tf_dp import analysis


def _cli(*flags):
  return subprocess.run(
      [sys.executable, "-m", "tf_dp.cli.compute_dp_sgd_privacy", *flags],
      check=True, capture_output=True, text=True).stdout


def test_prints_epsilon_and_order():
  out = _cli("--n=60000", "--batch_size=256", "--noise_multiplier=1.12",
             "--epochs=60", "--delta=1e-5", "--conversion=classic")
  assert "eps = 2.92" in out and "epsilon=2.92" in out and "order" in out


def test_accountant_flag():
  out = _cli("--n=60000", "--batch_size=256", "--noise_multiplier=1.3",
             "--epochs=3", "--delta=1e-5", "--accountant=pld")
  assert "PLD accountant" in out and "accountant=pld" in out
  value = float(out.split("epsilon=")[1].split()[0])
  expected, _ = analysis.compute_dp_sgd_privacy(60000, 256, 1.3, 3, 1e-5,
                                                accountant="pld")
  assert value == pytest.approx(expected, rel=1e-5)  # printed to 6 decimals.
