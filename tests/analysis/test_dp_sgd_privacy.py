"""Tests of the DP-SGD privacy computation, its inverses and the CLI."""

import subprocess
import sys

import pytest

from tf_dp import analysis


def test_tf_privacy_readme_number():
  eps, order = analysis.compute_dp_sgd_privacy(60000, 256, 1.12, 60, 1e-5,
                                               conversion="classic")
  assert eps == pytest.approx(2.92, abs=0.005) and order > 1


def test_fixed_size_batches_cost_more_than_poisson():
  poisson, _ = analysis.compute_dp_sgd_privacy(60000, 256, 1.1, 10, 1e-5)
  wor, _ = analysis.compute_dp_sgd_privacy(60000, 256, 1.1, 10, 1e-5,
                                           sampling="fixed_size")
  assert wor > poisson


def test_noise_multiplier_search_is_tight_and_conservative():
  z = analysis.compute_noise_multiplier(60000, 256, 3.0, 60, 1e-5)
  assert analysis.compute_dp_sgd_privacy(60000, 256, z, 60, 1e-5)[0] <= 3.0
  lower = z * (1 - 2e-3)
  assert analysis.compute_dp_sgd_privacy(60000, 256, lower, 60, 1e-5)[0] > 3.0


def test_epochs_search():
  epochs, steps = analysis.compute_epochs(60000, 256, 1.1, 2.0, 1e-5)
  assert steps > 0 and epochs == pytest.approx(steps * 256 / 60000)
  assert analysis.compute_dp_sgd_privacy(60000, 256, 1.1, epochs,
                                         1e-5)[0] <= 2.0
  more = (steps + 1) * 256 / 60000
  assert analysis.compute_dp_sgd_privacy(60000, 256, 1.1, more, 1e-5)[0] > 2.0


def test_batch_size_search():
  b = analysis.compute_batch_size(60000, 1.0, 2.0, 10, 1e-5)
  assert 1 < b < 60000
  assert analysis.compute_dp_sgd_privacy(60000, b, 1.0, 10, 1e-5)[0] <= 2.0
  assert analysis.compute_dp_sgd_privacy(60000, b + 1, 1.0, 10, 1e-5)[0] > 2.0


def test_unreachable_target_is_an_error():
  with pytest.raises(ValueError, match="target_epsilon"):
    analysis.compute_noise_multiplier(100, 100, 1e-6, 1000, 1e-5)


@pytest.mark.parametrize("args,name", [
    ((0, 256, 1.1, 1, 1e-5), "n"),
    ((100, 256, 1.1, 1, 1e-5), "batch_size"),
    ((60000, 256, -1.0, 1, 1e-5), "noise_multiplier"),
    ((60000, 256, 1.1, 1, 0.0), "delta"),
    ((60000, 256, 1.1, 0, 1e-5), "epochs"),
])
def test_invalid_arguments(args, name):
  with pytest.raises(ValueError, match=name):
    analysis.compute_dp_sgd_privacy(*args)


def test_command_line_prints_epsilon_and_order():
  out = subprocess.run(
      [sys.executable, "-m", "tf_dp.analysis.compute_dp_sgd_privacy",
       "--n=60000", "--batch_size=256", "--noise_multiplier=1.12",
       "--epochs=60", "--delta=1e-5", "--conversion=classic"],
      check=True, capture_output=True, text=True).stdout
  assert "eps = 2.92" in out and "epsilon=2.92" in out and "order" in out


def test_noise_command_line():
  out = subprocess.run(
      [sys.executable, "-m", "tf_dp.analysis.compute_noise_multiplier",
       "--n=60000", "--batch_size=256", "--target_epsilon=3", "--epochs=60"],
      check=True, capture_output=True, text=True).stdout
  assert "noise_multiplier=" in out and "epsilon=" in out
