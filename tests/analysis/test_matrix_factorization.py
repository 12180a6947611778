"""Correlated-noise strategies: factorizations, sensitivity and epsilon
against closed forms and brute force."""

import itertools
import math

import numpy as np
import pytest

from tf_dp.analysis import matrix_factorization as mf
from tf_dp.analysis import pld_gaussian
from tf_dp.errors import PrivacyError


def test_identity_strategy_is_dp_sgd_without_amplification():
  # b = 1: C = I, B = A; each participation is one unamplified Gaussian
  # mechanism, k of them compose to sqrt(k)-times the mu of one.
  s = mf.banded_strategy(20, 1)
  assert s.coefficients == (1.0,)
  np.testing.assert_array_equal(s.matrix(), np.eye(20))
  assert s.sensitivity() == 1.0
  assert s.sensitivity(participations=4, min_separation=5) == 2.0
  assert mf.expected_total_squared_error(mf.prefix_sum_workload(20),
                                         1.0) == 20 * 21 / 2
  # sigma 2, zero-out: mu = 1/2; four participations: mu = 1.
  mu = mf.gdp_mu(s.sensitivity(4, 5), 2.0, "zero_out")
  assert mu == 1.0
  assert mf.epsilon_of_mu(mu, 1e-5) == pld_gaussian.gaussian_dp_epsilon(
      1e-5, 1.0)
  assert mf.gdp_mu(1.0, 2.0, "replace_one") == 1.0


@pytest.mark.parametrize("n", [1, 5, 8, 64, 100])
def test_tree_single_pass(n):
  height = math.ceil(math.log2(n)) if n > 1 else 0
  s = mf.tree_strategy(n)
  c, left_inverse = mf.tree_matrices(n, height)
  np.testing.assert_allclose(left_inverse @ c, np.eye(n), atol=0)
  # Each leaf is in one node per level: sensitivity sqrt(ceil(log2 n) + 1).
  assert s.sensitivity() == pytest.approx(math.sqrt(height + 1), rel=1e-15)
  # Prefix t (1-based) uses popcount(t) nodes: ||B||_F^2 = sum popcount.
  b = mf.prefix_sum_workload(n) @ left_inverse
  np.testing.assert_allclose(b @ c, mf.prefix_sum_workload(n), atol=1e-12)
  assert np.sum(b ** 2) == sum(bin(t).count("1") for t in range(1, n + 1))


def test_tree_with_restarts_is_block_diagonal():
  c, left_inverse = mf.tree_matrices(10, 2)   # trees of 4, 4 and 2 leaves
  assert c.shape == (21, 10)
  np.testing.assert_allclose(left_inverse @ c, np.eye(10), atol=0)
  assert mf.max_row_span(c) == 3
  assert mf.sensitivity(c) == pytest.approx(math.sqrt(3))
  # Three participations >= 4 apart land in different trees.
  assert mf.sensitivity(c, 3, 4) == pytest.approx(3.0)
  with pytest.raises(PrivacyError, match="min_separation=3"):
    mf.sensitivity(c, 2, 3)


def _brute_sensitivity(c, k, sep):
  """max over patterns and sign choices of ||sum_t C_t g_t|| with scalar
  g_t = +-1 (the extreme points for orthogonal columns)."""
  n = c.shape[1]
  best = 0.0
  for size in range(1, k + 1):
    for pattern in itertools.combinations(range(n), size):
      if any(b - a < sep for a, b in zip(pattern, pattern[1:])):
        continue
      for signs in itertools.product((1, -1), repeat=size):
        best = max(best, np.linalg.norm(c[:, pattern] @ np.array(signs)))
  return best


@pytest.mark.parametrize("k,sep", [(2, 3), (3, 3), (2, 5), (4, 3)])
def test_banded_multi_participation_matches_brute_force(k, sep):
  c = mf.toeplitz_matrix(np.array([0.8, 0.5, 0.33]), 11)
  assert mf.max_row_span(c) == 2
  assert mf.sensitivity(c, k, sep) == pytest.approx(
      _brute_sensitivity(c, k, sep), rel=1e-12)


def test_overlapping_columns_are_refused():
  c = mf.toeplitz_matrix(np.array([0.8, 0.5, 0.33]), 11)
  with pytest.raises(PrivacyError, match="min_separation=2"):
    mf.sensitivity(c, 2, 2)
  with pytest.raises(ValueError, match="min_separation is required"):
    mf.sensitivity(c, 2)


def test_sqrt_factorization_squares_to_the_workload():
  c = mf.toeplitz_matrix(mf.sqrt_factorization_coefficients(50), 50)
  np.testing.assert_allclose(c @ c, mf.prefix_sum_workload(50), atol=1e-12)


@pytest.mark.parametrize("n,bands", [(64, 2), (64, 8), (64, 64), (300, 16)])
def test_optimised_banded_strategy(n, bands):
  s = mf.banded_strategy(n, bands)
  c = s.matrix()
  assert len(s.coefficients) == bands and s.coefficients[0] > 0
  assert np.linalg.norm(s.coefficients) == pytest.approx(1.0, rel=1e-12)
  assert mf.max_row_span(c) == bands - 1
  a = mf.prefix_sum_workload(n)
  b = a @ s.noise_matrix()
  np.testing.assert_allclose(b @ c, a, atol=1e-9)
  error = mf.expected_total_squared_error(b, s.sensitivity())
  # Never worse than its start (the truncated square-root factorization,
  # renormalised) and than the identity, n(n+1)/2.
  root = mf.sqrt_factorization_coefficients(bands)
  croot = mf.toeplitz_matrix(root, n)
  start = mf.expected_total_squared_error(a @ np.linalg.inv(croot),
                                          mf.sensitivity(croot))
  assert error <= start * (1 + 1e-9)
  assert error < n * (n + 1) / 2 / (1.5 if bands > 1 else 1)
  # A local optimum: nudging any coefficient does not help.
  base = mf._banded_error_per_unit_sensitivity(np.array(s.coefficients), n)
  for j in range(bands):
    for step in (1e-3, -1e-3):
      moved = np.array(s.coefficients)
      moved[j] += step
      assert mf._banded_error_per_unit_sensitivity(moved, n) >= base * (
          1 - 1e-6)


def test_more_bands_never_hurt_and_full_band_beats_tree():
  n = 128
  a = mf.prefix_sum_workload(n)
  errors = []
  for bands in (1, 2, 4, 16, 128):
    s = mf.banded_strategy(n, bands)
    errors.append(mf.expected_total_squared_error(a @ s.noise_matrix(),
                                                  s.sensitivity()))
  assert errors == sorted(errors, reverse=True)
  tree = mf.tree_strategy(n)
  tree_error = mf.expected_total_squared_error(a @ tree.noise_matrix(),
                                               tree.sensitivity())
  # sum of popcounts of 1..128 (7 * 64 + 1), times h + 1 = 8
  assert tree_error == pytest.approx(449 * 8, rel=1e-12)
  assert errors[-1] < tree_error


def test_toeplitz_k_participations_is_sqrt_k():
  s = mf.banded_strategy(40, 4)
  # Every column but the last three has norm 1.
  assert s.sensitivity(3, 10) == pytest.approx(math.sqrt(3), rel=1e-12)
  # Only two participations fit at separation 30 in 40 steps.
  assert s.sensitivity(3, 30) == pytest.approx(math.sqrt(2), rel=1e-12)


def test_noise_multiplier_for_epsilon_round_trip():
  sigma = mf.noise_multiplier_for_epsilon(math.sqrt(3), 3.0, 1e-5)
  assert mf.epsilon_of_mu(mf.gdp_mu(math.sqrt(3), sigma), 1e-5) <= 3.0
  assert mf.epsilon_of_mu(mf.gdp_mu(math.sqrt(3), sigma * (1 - 1e-6)),
                          1e-5) > 3.0


def test_strategy_checks_and_fingerprint():
  with pytest.raises(ValueError, match="kind"):
    mf.Strategy("dense", 10)
  with pytest.raises(ValueError, match="coefficients"):
    mf.Strategy(mf.BANDED_TOEPLITZ, 10, coefficients=(0.0, 1.0))
  with pytest.raises(ValueError, match="steps >= 3"):
    mf.Strategy(mf.BANDED_TOEPLITZ, 2, coefficients=(1.0, 0.5, 0.2))
  with pytest.raises(ValueError, match="bands must be at most"):
    mf.banded_strategy(3, 4)
  a = mf.Strategy(mf.BANDED_TOEPLITZ, 10, coefficients=(1.0, 0.5))
  b = mf.Strategy(mf.BANDED_TOEPLITZ, 10, coefficients=(1.0, 0.5 + 1e-16))
  c = mf.Strategy(mf.BANDED_TOEPLITZ, 11, coefficients=(1.0, 0.5))
  assert len({a.fingerprint(), b.fingerprint(), c.fingerprint()}) == 3
  assert a.fingerprint() == mf.Strategy(
      mf.BANDED_TOEPLITZ, 10, coefficients=(1.0, 0.5)).fingerprint()
