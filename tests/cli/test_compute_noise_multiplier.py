"""The command line ``tf_dp-compute-noise-multiplier`` prints the noise
multiplier of ``tf_dp.analysis.compute_noise_multiplier``."""

import subprocess
import sys

import pytest

from tf_dp import analysis


def test_prints_the_calibrated_noise_multiplier():
  out = subprocess.run(
      [sys.executable, "-m", "tf_dp.cli.compute_noise_multiplier",
       "--n=60000", "--batch_size=256", "--target_epsilon=3", "--epochs=60"],
      check=True, capture_output=True, text=True).stdout
  z = float(out.split("noise_multiplier=")[1].split()[0])
  eps = float(out.split("epsilon=")[1].split()[0])
  expected = analysis.compute_noise_multiplier(60000, 256, 3.0, 60, 1e-5)
  assert z == pytest.approx(expected, abs=5e-5)  # printed to 4 decimals.
  assert eps <= 3.0


def test_the_shared_run_flags_reach_the_calibration():
  out = subprocess.run(
      [sys.executable, "-m", "tf_dp.cli.compute_noise_multiplier",
       "--n=1000", "--batch_size=50", "--target_epsilon=2", "--epochs=2.5",
       "--delta=1e-6", "--sampling=fixed_size", "--accountant=rdp"],
      check=True, capture_output=True, text=True).stdout
  z = float(out.split("noise_multiplier=")[1].split()[0])
  expected = analysis.compute_noise_multiplier(
      1000, 50, 2.0, 2.5, 1e-6, sampling="fixed_size", accountant="rdp")
  assert z == pytest.approx(expected, abs=5e-5)  # printed to 4 decimals.
  assert "delta=1e-06" in out and "order" in out
