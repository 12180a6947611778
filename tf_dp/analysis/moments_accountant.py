"""The moments accountant of Abadi et al. (2016) by numerical integration.

An independent check on the closed-form RDP computation in ``rdp.py``: it
evaluates the paper's definitions directly (Abadi et al. 2016, Section 3.2). With
``mu0 = N(0, s^2)``, ``mu1 = N(1, s^2)`` and ``mu = (1 - q) mu0 + q mu1``,

    alpha(lambda) = log max(E1, E2),
    E1 = E_{z ~ mu0}[(mu0(z) / mu(z))^lambda],      (eq. 3)
    E2 = E_{z ~ mu}[(mu(z) / mu0(z))^lambda],       (eq. 4)

the log moments compose additively over ``T`` steps (Theorem 2.1), and the
tail bound (Theorem 2.2) gives
``epsilon = min_lambda (T alpha(lambda) + log(1/delta)) / lambda``.

This equals the classic RDP conversion at order ``lambda + 1``.
"""

import math
from typing import Optional, Tuple

import numpy as np
from scipy import integrate

from tf_dp.analysis import checks

DEFAULT_MAX_LAMBDA = 64


def _log_normal_pdf(z, mean, sigma):
  return (-(z - mean) ** 2 / (2 * sigma * sigma)
          - math.log(sigma * math.sqrt(2 * math.pi)))


def _integrate_log(log_f, lo, hi, points):
  """Integrates exp(log_f) over [lo, hi], rescaled to avoid overflow."""
  grid = np.linspace(lo, hi, 4001)
  shift = float(np.max(log_f(grid)))
  value, _ = integrate.quad(lambda z: math.exp(log_f(z) - shift), lo, hi,
                            points=points, limit=500, epsabs=0.0,
                            epsrel=1e-11)
  return math.log(value) + shift


def log_moment(sampling_probability: float, noise_multiplier: float,
               lam: int) -> float:
  """alpha(lambda) of one subsampled Gaussian step, by quadrature.

  ``sampling_probability`` is q, the probability that a record is in the
  lot (Poisson sampling).
  """
  q = checks.check_sampling_probability("sampling_probability",
                                        sampling_probability)
  sigma = checks.check_noise_multiplier("noise_multiplier",
                                        noise_multiplier)
  lam = checks.check_positive_int("lam", lam)
  if q == 0:
    return 0.0

  def log_mu0(z):
    return _log_normal_pdf(z, 0.0, sigma)

  def log_mu(z):
    return np.logaddexp(math.log1p(-q) + _log_normal_pdf(z, 0.0, sigma)
                        if q < 1 else -np.inf,
                        math.log(q) + _log_normal_pdf(z, 1.0, sigma))

  lo, hi = -20.0 * sigma - lam, 20.0 * sigma + lam + 1.0
  points = [0.0, 0.5, 1.0]
  log_e1 = _integrate_log(
      lambda z: log_mu0(z) + lam * (log_mu0(z) - log_mu(z)), lo, hi, points)
  log_e2 = _integrate_log(
      lambda z: log_mu(z) + lam * (log_mu(z) - log_mu0(z)), lo, hi, points)
  return max(log_e1, log_e2)


def moments_accountant_epsilon(
    sampling_probability: float, noise_multiplier: float, steps: int,
    delta: float, max_lambda: int = DEFAULT_MAX_LAMBDA
) -> Tuple[float, Optional[int]]:
  """Epsilon of ``steps`` DP-SGD steps by Abadi et al.'s moments accountant.

  Privacy contract: same mechanism and neighbouring relation as
  ``compute_rdp`` (Poisson sampling, add/remove one record).

  Args:
    sampling_probability: q, the probability that a record is in a lot
      (lot size / dataset size).
    noise_multiplier: Noise stddev divided by the clip norm.
    steps: Number of steps T.
    delta: Target delta.
    max_lambda: Largest moment order tried (the paper's code used 32).

  Returns:
    ``(epsilon, optimal_lambda)``.
  """
  steps = checks.check_steps("steps", steps)
  delta = checks.check_delta("delta", delta)
  best: Tuple[float, Optional[int]] = (math.inf, None)
  for lam in range(1, checks.check_positive_int("max_lambda",
                                                max_lambda) + 1):
    alpha = log_moment(sampling_probability, noise_multiplier, lam)
    eps = (steps * alpha + math.log(1.0 / delta)) / lam
    if eps < best[0]:
      best = (eps, lam)
  return best
