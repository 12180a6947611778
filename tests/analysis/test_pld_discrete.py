"""Tests of tf_dp.analysis.pld_discrete: discrete PLDs and their composition.

References: the definition delta(eps) = inf_mass + sum_k pmf_k (1 -
e^{eps - l_k})_+ evaluated by a loop, convolution by a double loop, and the
closed-form Gaussian profile of tf_dp.analysis.pld_gaussian for the
connect-the-dots construction.
"""

import math

import numpy as np
import pytest

from tf_dp.analysis import pld_discrete
from tf_dp.analysis import pld_gaussian


def delta_by_loop(h, lo, pmf, inf_mass, eps):
  total = inf_mass
  for k, p in enumerate(pmf):
    loss = (lo + k) * h
    if loss > eps:
      total += p * (1.0 - math.exp(eps - loss))
  return total


def convolve_by_loop(a, b):
  out = np.zeros(len(a) + len(b) - 1)
  for i, x in enumerate(a):
    for j, y in enumerate(b):
      out[i + j] += x * y
  return out


def small_pld(rng, n, lo, inf_mass, h=0.05):
  pmf = rng.uniform(0.0, 1.0, n)
  pmf *= (1.0 - inf_mass) / pmf.sum()
  return pld_discrete.DiscretePld(h, lo, pmf, inf_mass)


def test_infinite_loss_mass():
  """Mass at +inf: delta never below it, epsilon infinite below it."""
  d = pld_discrete.DiscretePld(0.1, -2, np.array([0.2, 0.3, 0.499]), 1e-3)
  assert d.get_epsilon(1e-4) == math.inf
  assert math.isfinite(d.get_epsilon(2e-3))
  assert d.get_delta(100.0) == pytest.approx(1e-3)
  both = d.compose(d, 0.0)
  assert both.inf_mass == pytest.approx(1 - (1 - 1e-3) ** 2)
  assert both.get_delta(100.0) == pytest.approx(1 - (1 - 1e-3) ** 2)


@pytest.mark.parametrize("eps", [-0.3, 0.0, 0.12, 0.5, 1.7, 10.0])
def test_get_delta_is_the_definition(eps):
  d = small_pld(np.random.default_rng(0), 40, -10, 1e-4)
  assert d.get_delta(eps) == pytest.approx(
      delta_by_loop(d.h, d.lo, d.pmf, d.inf_mass, eps), rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("delta", [0.3, 1e-2, 1e-3, 2e-4])
def test_get_epsilon_is_the_smallest_epsilon_with_that_delta(delta):
  """delta(get_epsilon(d)) <= d, and any smaller epsilon gives more than d
  (delta is continuous and decreasing between grid points)."""
  d = small_pld(np.random.default_rng(1), 60, -20, 1e-4)
  eps = d.get_epsilon(delta)
  assert 0.0 < eps < d.losses[-1]
  assert delta_by_loop(d.h, d.lo, d.pmf, d.inf_mass, eps) <= delta * (
      1 + 1e-12)
  assert delta_by_loop(d.h, d.lo, d.pmf, d.inf_mass, eps - 1e-6) > delta


def test_get_epsilon_is_zero_when_delta_at_zero_suffices():
  d = small_pld(np.random.default_rng(2), 10, -5, 0.0)
  assert d.get_epsilon(d.get_delta(0.0) + 1e-9) == 0.0


def test_identity_releases_nothing():
  d = pld_discrete.DiscretePld.identity(0.01)
  assert d.get_delta(0.0) == 0.0 and d.get_epsilon(1e-9) == 0.0


def test_compose_is_the_convolution():
  rng = np.random.default_rng(3)
  a, b = small_pld(rng, 7, -3, 1e-3), small_pld(rng, 5, 2, 2e-3)
  both = a.compose(b, 0.0)
  assert both.lo == a.lo + b.lo
  np.testing.assert_allclose(both.pmf, convolve_by_loop(a.pmf, b.pmf),
                             rtol=1e-12)
  assert both.inf_mass == pytest.approx(1 - (1 - 1e-3) * (1 - 2e-3))


def test_compose_refuses_different_grids():
  a = pld_discrete.DiscretePld(0.1, 0, np.ones(1), 0.0)
  b = pld_discrete.DiscretePld(0.2, 0, np.ones(1), 0.0)
  with pytest.raises(ValueError, match="Grids differ"):
    a.compose(b, 0.0)


def test_truncate_moves_mass_up_only():
  """Total mass is kept, the lower tail lands on the lowest kept point, the
  upper tail at +inf, so delta never decreases."""
  pmf = np.array([1e-6, 2e-6, 0.3, 0.4, 0.299, 5e-4, 4e-4, 97e-6])
  d = pld_discrete.DiscretePld(0.1, -3, pmf, 0.0)
  t = d.truncate(1e-3)
  assert t.lo == d.lo + 2
  assert t.pmf[0] == pytest.approx(0.3 + 3e-6)
  assert t.inf_mass == pytest.approx(5e-4 + 4e-4 + 97e-6)
  assert np.sum(t.pmf) + t.inf_mass == pytest.approx(np.sum(pmf))
  for eps in np.linspace(-0.5, 1.0, 31):
    assert t.get_delta(eps) >= d.get_delta(eps) - 1e-15


def test_compose_all_matches_repeated_compose():
  """One product of spectra equals composing copy by copy; with a positive
  tail mass the result is an upper bound within that tail mass."""
  rng = np.random.default_rng(4)
  a, b = small_pld(rng, 30, -12, 1e-5), small_pld(rng, 20, -4, 0.0)
  exact = pld_discrete.DiscretePld.identity(a.h)
  for pld in [a] * 5 + [b] * 3:
    exact = exact.compose(pld, 0.0)
  tight = pld_discrete.compose_all([(a, 5), (b, 3)], 1e-300, a.h)
  cut = pld_discrete.compose_all([(a, 5), (b, 3)], 1e-9, a.h)
  for eps in (0.0, 0.3, 1.0, 2.0):
    want = exact.get_delta(eps)
    assert tight.get_delta(eps) == pytest.approx(want, rel=1e-9, abs=1e-15)
    assert want - 1e-14 <= cut.get_delta(eps) <= want + 2e-9 + 1e-14
  assert a.self_compose(5, 1e-300).get_delta(0.5) == pytest.approx(
      pld_discrete.compose_all([(a, 5)], 1e-300, a.h).get_delta(0.5))


def test_compose_all_of_nothing_is_the_identity():
  d = pld_discrete.compose_all([], 1e-15, 0.1)
  assert d.get_delta(0.0) == 0.0


def test_compose_all_with_certain_infinite_loss_is_all_mass_at_inf():
  a = pld_discrete.DiscretePld(0.1, 0, np.zeros(3), 1.0)
  d = pld_discrete.compose_all([(a, 2)], 1e-15, 0.1)
  assert d.inf_mass == 1.0 and d.get_epsilon(0.5) == math.inf


@pytest.mark.parametrize("direction", ["remove", "add", "symmetric"])
def test_connect_the_dots_is_exact_on_the_knots_and_pessimistic_between(
    direction):
  q, sigma, h = 0.1, 1.0, 0.02
  profile = pld_gaussian.privacy_profile(direction, q, sigma, 1.0)
  lo, hi = pld_gaussian.loss_range(direction, q, sigma, 1.0, 1e-12)
  d = pld_discrete.DiscretePld.from_profile(profile, lo, hi, h)
  knots = d.losses[(d.losses > 0) & (d.losses < hi - h)][::7]
  for eps in knots:
    assert d.get_delta(eps) == pytest.approx(profile(np.array([eps]))[0],
                                             rel=1e-6, abs=1e-13)
  between = knots[:-1] + 0.37 * h
  for eps in between:
    assert d.get_delta(eps) >= profile(np.array([eps]))[0] - 1e-13


def test_a_too_fine_grid_is_refused():
  profile = pld_gaussian.privacy_profile("remove", 0.1, 1.0, 1.0)
  with pytest.raises(pld_discrete.GridTooFine, match="span more than"):
    pld_discrete.DiscretePld.from_profile(profile, -1.0, 10.0, 1e-7)
