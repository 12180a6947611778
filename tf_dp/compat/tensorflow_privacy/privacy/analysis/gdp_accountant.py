"""TF Privacy's ``gdp_accountant``: Gaussian-DP (mu-GDP) figures of DP-SGD.

Same functions and arguments as TF Privacy's module. The mu of ``epoch``
passes of DP-SGD is the central-limit approximation of Bu, Dong, Long and
Su (2020, "Deep learning with Gaussian differential privacy", Harvard Data
Science Review, Theorems 4 and 5; Dong, Roth and Su 2022, JRSS-B, Theorem
6): with ``p = batch_size / n`` and ``T = epoch * n / batch_size`` steps,

* Poisson lots: ``mu = p * sqrt(T * (exp(1 / sigma^2) - 1))``;
* uniformly sampled lots: ``mu = sqrt(2) * p * sqrt(T) * sqrt(exp(1 /
  sigma^2) * Phi(1.5 / sigma) + 3 * Phi(-0.5 / sigma) - 2)``;

and ``(epsilon, delta)`` follows from mu-GDP exactly
(``delta = Phi(-epsilon / mu + mu / 2) - e^epsilon Phi(-epsilon / mu - mu /
2)``).

Privacy contract: none. The central limit is approached as ``T`` grows
with ``p * sqrt(T)`` fixed; for a finite run its mu is an estimate, not an
upper bound, and it can understate epsilon (a warning says so). An epsilon
to stand behind comes from the ledger (``tf_dp.analysis.
compute_epsilon_from_ledger``) or, for TF Privacy's arguments,
``compute_dp_sgd_privacy_lib.compute_dp_sgd_privacy``.

Pure Python: no TensorFlow is imported.
"""

import math
import warnings

from scipy import stats

from tf_dp.analysis import checks
from tf_dp.analysis import pld_gaussian

_APPROXIMATION = (
    "gdp_accountant's mu is the central-limit approximation of Bu et al. "
    "(2020): an estimate that can understate epsilon for a finite run, not "
    "a bound. For an epsilon to publish use tf_dp.analysis."
    "compute_epsilon_from_ledger (the run's ledger) or compute_dp_sgd_privacy"
    "_lib.compute_dp_sgd_privacy.")


def _steps_and_rate(epoch, noise_multi, n, batch_size):
  n = checks.check_positive_int("n", n)
  batch_size = checks.check_positive_int("batch_size", batch_size)
  if batch_size > n:
    raise ValueError(f"batch_size ({batch_size}) must be at most n ({n}).")
  epoch = checks.check_positive("epoch", epoch)
  noise_multi = checks.check_positive("noise_multi", noise_multi)
  warnings.warn(_APPROXIMATION, UserWarning, stacklevel=3)
  return epoch * n / batch_size, batch_size / n, noise_multi


def compute_mu_uniform(epoch: float, noise_multi: float, n: int,
                       batch_size: int) -> float:
  """mu of ``epoch`` passes of uniformly sampled lots (an estimate)."""
  steps, rate, sigma = _steps_and_rate(epoch, noise_multi, n, batch_size)
  inner = (math.exp(sigma ** -2) * stats.norm.cdf(1.5 / sigma)
           + 3 * stats.norm.cdf(-0.5 / sigma) - 2)
  return math.sqrt(2) * rate * math.sqrt(steps) * math.sqrt(inner)


def compute_mu_poisson(epoch: float, noise_multi: float, n: int,
                       batch_size: int) -> float:
  """mu of ``epoch`` passes of Poisson lots of expected size ``batch_size``
  (an estimate)."""
  steps, rate, sigma = _steps_and_rate(epoch, noise_multi, n, batch_size)
  return rate * math.sqrt(steps * math.expm1(sigma ** -2))


def delta_eps_mu(eps: float, mu: float) -> float:
  """The delta at which mu-GDP gives ``eps`` (exact)."""
  mu = checks.check_positive("mu", mu)
  return pld_gaussian.gaussian_dp_delta(float(eps), mu)


def eps_from_mu(mu: float, delta: float) -> float:
  """The smallest epsilon that mu-GDP gives at ``delta`` (exact)."""
  mu = checks.check_positive("mu", mu)
  delta = checks.check_delta("delta", delta)
  return pld_gaussian.gaussian_dp_epsilon(delta, mu)


def compute_eps_uniform(epoch: float, noise_multi: float, n: int,
                        batch_size: int, delta: float) -> float:
  """epsilon at ``delta`` of ``compute_mu_uniform`` (an estimate)."""
  return eps_from_mu(compute_mu_uniform(epoch, noise_multi, n, batch_size),
                     delta)


def compute_eps_poisson(epoch: float, noise_multi: float, n: int,
                        batch_size: int, delta: float) -> float:
  """epsilon at ``delta`` of ``compute_mu_poisson`` (an estimate)."""
  return eps_from_mu(compute_mu_poisson(epoch, noise_multi, n, batch_size),
                     delta)
