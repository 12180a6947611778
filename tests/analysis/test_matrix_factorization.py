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


# Published values and closed forms from the papers' definitions.


@pytest.mark.parametrize("s", [mf.tree_strategy(13), mf.tree_strategy(20, 2),
                               mf.banded_strategy(12, 4),
                               mf.banded_strategy(5, 1), mf.tree_strategy(1)])
def test_released_sensitivity_is_that_of_the_released_rows(s):
  """Closed-form column norms and span against the explicit released
  matrix, for every prefix of the run and 1 to 3 participations."""
  assert s.released_sensitivity(0) == 0.0
  for t in range(1, s.steps + 1):
    c = mf.released_matrix(s, t)
    assert c.shape[1] == t
    assert s.released_sensitivity(t) == pytest.approx(mf.sensitivity(c),
                                                      rel=1e-12)
    for k in (2, 3):
      sep = s.bands
      assert s.released_sensitivity(t, k, sep) == pytest.approx(
          mf.sensitivity(c, k, sep), rel=1e-12)
  # All steps run: the whole strategy's rows, except unreleased tree nodes.
  if s.kind == mf.BANDED_TOEPLITZ or s.steps == s.bands:
    assert s.released_sensitivity(s.steps) == pytest.approx(s.sensitivity(),
                                                            rel=1e-12)
  with pytest.raises(ValueError, match="steps_run"):
    s.released_sensitivity(s.steps + 1)


def test_tree_sensitivity_is_kairouz_et_al_ceil_log2_t_plus_1():
  """Kairouz et al. 2021, "Practical and Private (Deep) Learning without
  Sampling or Shuffling", Sec. 3 and App. D: in a binary tree over T
  leaves one leaf is in at most ceil(log2(T + 1)) released nodes, so one
  participation has L2 sensitivity sqrt(ceil(log2(T + 1))) (closed form of
  the paper; a tree of 2^h leaves stopped after T steps releases the nodes
  complete by then). With the tree restarted every epoch of T = 2^h steps,
  E epochs have sensitivity sqrt(E * (h + 1)) (App. D, restarts)."""
  s = mf.tree_strategy(200)
  for t in range(1, 201):
    assert s.released_sensitivity(t) ** 2 == pytest.approx(
        math.ceil(math.log2(t + 1)), rel=1e-12)
  for h, epochs in ((3, 5), (4, 2), (0, 7)):
    per_epoch = 2 ** h
    s = mf.tree_strategy(per_epoch * epochs, h)
    assert s.released_sensitivity(s.steps, epochs, per_epoch) ** 2 == (
        pytest.approx(epochs * (h + 1), rel=1e-12))


@pytest.mark.parametrize("steps,epochs", [(16, 1), (5, 1), (100, 1),
                                          (64, 6), (1024, 3), (60, 4),
                                          (100, 3)])
def test_tree_matches_dp_accounting_tree_aggregation_event(steps, epochs):
  """dp_accounting 0.6.0's SingleEpochTreeAggregationDpEvent (Kairouz et
  al. 2021, App. D; restarted every epoch: SelfComposedDpEvent) has the RDP
  of a Gaussian with noise multiplier sigma / sqrt(ceil(log2(T + 1))) per
  epoch: its RDP epsilon equals that of one Gaussian with tf_dp's
  zero-out mu = sens / sigma to 1e-9, and tf_dp's exact GDP epsilon is at
  most it. Over several epochs of P steps tf_dp restarts its tree every
  2^floor(log2 P) steps, not at each epoch; its sensitivity is still the
  paper's, as floor(log2 P) + 1 = ceil(log2(P + 1)) (P = 60, 100)."""
  dp_accounting = pytest.importorskip("dp_accounting")
  sigma, delta = 4.0, 1e-6
  if epochs == 1:
    height = max(0, math.ceil(math.log2(steps)))
  else:
    height = int(math.floor(math.log2(steps)))
  s = mf.tree_strategy(steps * epochs, height)
  sens = s.released_sensitivity(s.steps, epochs,
                                steps if epochs > 1 else None)
  # REPLACE_SPECIAL: one example's contribution replaced by zeros, the
  # papers' relation (tf_dp's "zero_out").
  zero_out = dp_accounting.NeighboringRelation.REPLACE_SPECIAL
  theirs = dp_accounting.rdp.RdpAccountant(neighboring_relation=zero_out)
  theirs.compose(dp_accounting.SelfComposedDpEvent(
      dp_accounting.SingleEpochTreeAggregationDpEvent(sigma, steps), epochs))
  gaussian = dp_accounting.rdp.RdpAccountant(neighboring_relation=zero_out)
  gaussian.compose(dp_accounting.GaussianDpEvent(sigma / sens))
  assert theirs.get_epsilon(delta) == pytest.approx(
      gaussian.get_epsilon(delta), rel=1e-9)
  ours = mf.epsilon_of_mu(mf.gdp_mu(sens, sigma, "zero_out"), delta)
  assert ours <= theirs.get_epsilon(delta)


def test_banded_k_participations_is_choquette_choo_et_al_theorem_2():
  """Choquette-Choo et al. 2023, "(Amplified) Banded Matrix Factorization",
  Thm. 2 (b-min-separation): for a b-banded C and participations at least
  b apart, sens = max over patterns of sqrt(sum_t ||C[:, t]||^2) <=
  sqrt(k) * max_t ||C[:, t]||, with equality when k columns of the
  largest norm fit the pattern (closed form: a normalised Toeplitz C has
  unit column norms before its last b - 1 columns)."""
  s = mf.banded_strategy(48, 4)
  for k, sep in ((1, 48), (2, 4), (3, 12), (4, 11), (5, 11)):
    fit = min(k, 1 + (48 - 4) // sep)   # patterns within the unit columns
    assert s.sensitivity(k, sep if k > 1 else None) == pytest.approx(
        math.sqrt(fit), rel=1e-12)
    assert s.sensitivity(k, sep if k > 1 else None) <= math.sqrt(k) * (
        mf.column_norms(s.matrix()).max()) * (1 + 1e-12)


def test_gdp_to_epsilon_delta_is_dong_roth_su_corollary_2_13():
  """Dong, Roth & Su 2022 (JRSS-B), Cor. 2.13 (= Balle & Wang 2018,
  Thm. 8, analytic Gaussian mechanism): mu-GDP is (eps, delta(eps))-DP
  with delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2),
  exactly; tf_dp's eps at delta solves it (closed form, to 1e-9)."""
  from scipy import stats  # pylint: disable=g-import-not-at-top
  for mu in (0.1, 0.35, 1.0, 1.78, 3.0, 8.0):
    for delta in (1e-3, 1e-5, 1e-9):
      eps = mf.epsilon_of_mu(mu, delta)
      got = (stats.norm.cdf(-eps / mu + mu / 2) -
             math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2))
      assert got == pytest.approx(delta, rel=1e-6)


def test_gdp_published_values_bu_dong_long_su_2020():
  """Bu, Dong, Long & Su 2020, "Deep Learning with Gaussian Differential
  Privacy" (Harvard Data Science Review), Fig. 4 caption: mu = 0.35 gives
  (1.34, 1e-5)-DP and mu = 1.78 gives (8.68, 1e-5)-DP. mu is published to
  two decimals, so the published epsilon must lie between tf_dp's at
  mu -+ 0.005 (it does: [1.320, 1.363] and [8.639, 8.698])."""
  for mu, published in ((0.35, 1.34), (1.78, 8.68)):
    low = mf.epsilon_of_mu(mu - 0.005, 1e-5)
    high = mf.epsilon_of_mu(mu + 0.005, 1e-5)
    assert low <= published <= high
  assert round(mf.epsilon_of_mu(0.35, 1e-5), 2) == 1.34
