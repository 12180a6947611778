"""TF Privacy's ``gdp_accountant`` on the compat module: closed forms of
mu-GDP, the central-limit mu against tf_dp's PLD epsilon, and the warning
that the mu is an estimate. No TensorFlow is imported here."""

import math

import pytest
from scipy import stats

from tf_dp.analysis import pld
from tf_dp.compat.tensorflow_privacy.privacy.analysis import gdp_accountant

pytestmark = pytest.mark.filterwarnings(
    "ignore:gdp_accountant's mu:UserWarning")


def test_full_batches_compose_as_gaussians():
  """p = 1: T Gaussian steps of noise sigma are sqrt(T) / sigma-GDP
  exactly; the Poisson formula gives p sqrt(T (e^(1/sigma^2) - 1)), which
  tends to it (0.2005 against 0.2 at T = 4, sigma = 10)."""
  mu = gdp_accountant.compute_mu_poisson(4, 10.0, 100, 100)
  assert mu == pytest.approx(2 * math.sqrt(math.expm1(0.01)), rel=1e-12)
  assert mu == pytest.approx(0.2, rel=3e-3)


def test_uniform_formula():
  """Bu et al. (2020), Theorem 5, written out at n 60000, B 256, sigma
  1.1, 15 epochs."""
  p, steps, sigma = 256 / 60000, 15 * 60000 / 256, 1.1
  expected = math.sqrt(2) * p * math.sqrt(steps) * math.sqrt(
      math.exp(sigma ** -2) * stats.norm.cdf(1.5 / sigma)
      + 3 * stats.norm.cdf(-0.5 / sigma) - 2)
  assert gdp_accountant.compute_mu_uniform(15, sigma, 60000, 256) == (
      pytest.approx(expected, rel=1e-12))


def test_delta_and_epsilon_of_mu():
  """delta(0) = Phi(mu/2) - Phi(-mu/2) (0.38292 at mu = 1), and
  eps_from_mu inverts delta_eps_mu."""
  assert gdp_accountant.delta_eps_mu(0.0, 1.0) == pytest.approx(
      stats.norm.cdf(0.5) - stats.norm.cdf(-0.5), rel=1e-9)
  for mu in (0.3, 1.0, 3.0):
    eps = gdp_accountant.eps_from_mu(mu, 1e-5)
    assert gdp_accountant.delta_eps_mu(eps, mu) == pytest.approx(1e-5,
                                                                 rel=1e-6)


def test_poisson_estimate_is_near_the_pld_bound_and_warns():
  """MNIST-like run (n 60000, B 256, sigma 1.1, 15 epochs): the
  central-limit epsilon (1.077) is within 25% of tf_dp's PLD bound for the
  same Poisson lots (1.134), and below it: the estimate understates, and
  the call warns that it is not a bound."""
  with pytest.warns(UserWarning, match="not\\s+a bound"):
    clt = gdp_accountant.compute_eps_poisson(15, 1.1, 60000, 256, 1e-5)
  steps = round(15 * 60000 / 256)
  bound = pld.dp_sgd_pld_epsilon(256 / 60000, 1.1, steps, 1e-5)
  assert clt == pytest.approx(bound, rel=0.25), (clt, bound)
  assert clt < bound


def test_bad_arguments_name_themselves():
  with pytest.raises(ValueError, match="batch_size"):
    gdp_accountant.compute_mu_poisson(1, 1.0, 10, 20)
  with pytest.raises(ValueError, match="noise_multi"):
    gdp_accountant.compute_mu_uniform(1, 0.0, 10, 5)
