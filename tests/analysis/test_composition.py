"""Tests of advanced composition, amplification and zCDP against hand values."""

import math

import pytest

from tf_dp import analysis


def test_abadi_strong_composition_figure():
  # Abadi et al. 2016 quote eps ~ 9.34 for q=0.01, sigma=4, T=1e4, 1e-5.
  first = analysis.strong_composition_dp_sgd_epsilon(0.01, 4.0, 10000, 1e-5)
  exact = analysis.strong_composition_dp_sgd_epsilon(0.01, 4.0, 10000, 1e-5,
                                                     first_order=False)
  assert first == pytest.approx(9.34, abs=0.005)
  assert exact == pytest.approx(9.35, abs=0.01) and exact > first


def test_advanced_composition_hand_value():
  eps, delta = analysis.advanced_composition(0.1, 1e-6, 100, 1e-5)
  hand = math.sqrt(200 * math.log(1e5)) * 0.1 + 100 * 0.1 * math.expm1(0.1)
  assert eps == pytest.approx(hand, rel=1e-12)
  assert delta == pytest.approx(100 * 1e-6 + 1e-5)


def test_amplification_hand_value():
  eps, delta = analysis.amplify_by_poisson_sampling(1.0, 1e-5, 0.01)
  assert eps == pytest.approx(math.log(1 + 0.01 * (math.e - 1)))
  assert delta == pytest.approx(1e-7)


def test_gaussian_mechanism_round_trip():
  eps = analysis.gaussian_mechanism_epsilon(4.0, 1e-5)
  assert eps == pytest.approx(math.sqrt(2 * math.log(1.25e5)) / 4)
  assert analysis.gaussian_mechanism_noise_multiplier(eps, 1e-5) == (
      pytest.approx(4.0))


def test_zcdp_chain():
  rho = analysis.gaussian_zcdp(sensitivity=2.0, stddev=4.0)
  assert rho == pytest.approx(4.0 / 32.0)
  eps = analysis.zcdp_to_dp_epsilon(rho, 1e-4)
  assert eps == pytest.approx(rho + 2 * math.sqrt(rho * math.log(1e4)))
  assert analysis.zcdp_rho_for_epsilon(eps, 1e-4) == pytest.approx(rho)


def test_invalid_arguments():
  with pytest.raises(ValueError, match="delta_prime"):
    analysis.advanced_composition(0.1, 0.0, 10, 0.0)
  with pytest.raises(ValueError, match="noise_multiplier"):
    analysis.gaussian_mechanism_epsilon(0.0, 1e-5)
  with pytest.raises(ValueError, match="stddev"):
    analysis.gaussian_zcdp(1.0, 0.0)


def test_group_privacy_of_a_pure_dp_curve_is_k_epsilon():
  # A curve constant in delta (pure eps-DP, here 1.0): Lemma 2.2 gives
  # (k eps, d (e^{k eps} - 1) / (e^eps - 1)) for every d, so the group
  # epsilon is exactly k eps at any delta (k = 1: the curve itself).
  for k in (1, 2, 7):
    assert analysis.group_privacy_epsilon(lambda d: 1.0, k, 1e-5) == (
        pytest.approx(k * 1.0, rel=1e-12))


def test_group_privacy_solves_for_the_example_delta():
  # eps(d) = log(1/d) / 10 (decreasing in d). At the returned epsilon
  # k eps(d*), the group delta of Lemma 2.2 equals the target (rel 1e-6:
  # Brent's xtol 1e-10 on log d).
  curve = lambda d: math.log(1.0 / d) / 10.0
  k, target = 3, 1e-5
  group_eps = analysis.group_privacy_epsilon(curve, k, target)
  eps = group_eps / k
  d = math.exp(-10.0 * eps)
  assert d * math.expm1(k * eps) / math.expm1(eps) == pytest.approx(
      target, rel=1e-6)
  assert group_eps > k * curve(target)  # d* < target: a larger epsilon.


def test_group_privacy_is_infinite_when_no_example_delta_reaches_it():
  # eps(d) = 5 for every d: groups of 200 need d (e^1000 - 1)/(e^5 - 1) <=
  # 1e-5, i.e. d below e^-990, past the search floor: no finite bound.
  assert math.isinf(analysis.group_privacy_epsilon(lambda d: 5.0, 200,
                                                   1e-5))
  with pytest.raises(ValueError, match="group_size"):
    analysis.group_privacy_epsilon(lambda d: 1.0, 0, 1e-5)
