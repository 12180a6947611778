"""Tests of the DP-SGD privacy computation, its inverses and the CLI."""


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
