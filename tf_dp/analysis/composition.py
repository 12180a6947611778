"""(epsilon, delta) composition, amplification and zCDP.

The classical tools that Abadi et al. (2016) and Ermis & Cemgil (2017)
compare against: the advanced
(strong) composition theorem (Dwork & Roth 2014, Thm. 3.20), amplification by
Poisson subsampling (Li, Qardaji & Su 2012, Thm. 1; Ermis & Cemgil 2017,
eq. (7)), the classical Gaussian mechanism (Dwork & Roth 2014, Thm. A.1) and
zero-concentrated DP (Bun & Steinke 2016, Prop. 1.3, 1.6 and Lemma 1.7; Ermis
& Cemgil 2017, eq. (6)). They are looser than RDP accounting and are kept to
reproduce published figures and as independent upper bounds. Group privacy
(Vadhan 2017, Lemma 2.2) turns an example-level curve into a bound for a
user's k examples.
"""

import math
from typing import Callable, Tuple

import numpy as np
from scipy import optimize

from tf_dp.analysis import checks


def _expm1(x):
  """math.expm1 that returns inf instead of raising OverflowError."""
  return math.inf if x > 709.0 else math.expm1(x)


def advanced_composition(epsilon: float, delta: float, k: int,
                         delta_prime: float) -> Tuple[float, float]:
  """k-fold adaptive composition of (epsilon, delta)-DP mechanisms.

  Returns ``(sqrt(2k log(1/delta')) eps + k eps (e^eps - 1), k delta + delta')``
  (Dwork & Roth 2014, Theorem 3.20).
  """
  epsilon = checks.check_epsilon("epsilon", epsilon)
  delta = checks.check_delta("delta", delta, allow_zero=True)
  k = checks.check_steps("k", k)
  delta_prime = checks.check_delta("delta_prime", delta_prime)
  if k == 0:  # Nothing composed (and no 0 * inf when epsilon is inf).
    return 0.0, delta_prime
  eps_total = (math.sqrt(2 * k * math.log(1 / delta_prime)) * epsilon
               + k * epsilon * _expm1(epsilon))
  return eps_total, k * delta + delta_prime


def amplify_by_poisson_sampling(
    epsilon: float, delta: float, sampling_probability: float
) -> Tuple[float, float]:
  """Privacy amplification of an (eps, delta)-DP step by Poisson sampling.

  Returns ``(log(1 + q (e^eps - 1)), q delta)`` (Li et al. 2012, Thm. 1)
  with ``q = sampling_probability``. ``delta`` must lie in [0, 1] and ``q``
  in [0, 1] (``ValueError`` else).
  """
  epsilon = checks.check_epsilon("epsilon", epsilon)
  delta = checks.check_delta("delta", delta, allow_zero=True)
  q = checks.check_sampling_probability("sampling_probability",
                                        sampling_probability)
  if q == 0 or epsilon == 0:
    return 0.0, q * delta
  # log(1 + exp(log q + log(e^eps - 1))): no overflow, no cancellation.
  log_x = math.log(q) + epsilon + math.log(-math.expm1(-epsilon))
  return float(np.logaddexp(0.0, log_x)), q * delta


def gaussian_mechanism_epsilon(noise_multiplier: float, delta: float) -> float:
  """Epsilon of the classical Gaussian mechanism: sqrt(2 log(1.25/delta))/z.

  ``noise_multiplier`` is the noise stddev divided by the L2 sensitivity.
  The theorem holds for epsilon < 1; larger values are returned as computed
  (as Abadi et al. and Ermis & Cemgil use them) and are then not a proven guarantee.
  """
  z = checks.check_noise_multiplier("noise_multiplier", noise_multiplier)
  delta = checks.check_delta("delta", delta)
  return math.sqrt(2 * math.log(1.25 / delta)) / z


def gaussian_mechanism_noise_multiplier(epsilon: float, delta: float) -> float:
  """Inverse of ``gaussian_mechanism_epsilon``."""
  epsilon = checks.check_epsilon("epsilon", epsilon, allow_zero=False)
  delta = checks.check_delta("delta", delta)
  return math.sqrt(2 * math.log(1.25 / delta)) / epsilon


def gaussian_zcdp(sensitivity: float, stddev: float) -> float:
  """rho of the Gaussian mechanism: sensitivity^2 / (2 stddev^2) (Prop. 1.6)."""
  sensitivity = checks.check_real("sensitivity", sensitivity, low=0.0,
                                  allow_inf=False)
  stddev = checks.check_real("stddev", stddev, low=0.0, low_open=True)
  return sensitivity ** 2 / (2.0 * stddev ** 2)


def zcdp_to_dp_epsilon(rho: float, delta: float) -> float:
  """Epsilon of a rho-zCDP mechanism: rho + 2 sqrt(rho log(1/delta)) (Prop. 1.3)."""
  rho = checks.check_real("rho", rho, low=0.0)
  delta = checks.check_delta("delta", delta)
  return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))


def zcdp_rho_for_epsilon(epsilon: float, delta: float) -> float:
  """Largest rho with rho + 2 sqrt(rho log(1/delta)) <= epsilon (inverse)."""
  epsilon = checks.check_epsilon("epsilon", epsilon)
  delta = checks.check_delta("delta", delta)
  root = math.sqrt(math.log(1.0 / delta) + epsilon) - math.sqrt(
      math.log(1.0 / delta))
  return root * root


def strong_composition_dp_sgd_epsilon(sampling_probability: float,
                                      noise_multiplier: float, steps: int,
                                      delta: float,
                                      first_order: bool = True) -> float:
  """Epsilon of DP-SGD under the strong composition theorem (Abadi et al.).

  Each step is (eps0, delta0)-DP for the lot by the classical Gaussian
  mechanism, ``(q eps0, q delta0)``-DP for the dataset by amplification,
  and ``steps`` steps compose by ``advanced_composition``. Delta is split
  evenly: ``delta' = delta / 2`` and ``steps * q * delta0 = delta / 2``.

  With ``first_order=True`` the composition term ``k eps (e^eps - 1)`` is
  replaced by its first-order form ``k eps^2``; this reproduces the figure
  quoted by Abadi et al. (2016), eps ~ 9.34 for q=0.01, z=4, T=10^4,
  delta=1e-5. The exact theorem (``first_order=False``) gives 9.35.
  Limits: ``q = sampling_probability = 0`` (nothing sampled) and
  ``noise_multiplier = inf`` (nothing released) give epsilon 0.
  """
  q = checks.check_sampling_probability("sampling_probability",
                                        sampling_probability)
  noise_multiplier = checks.check_noise_multiplier("noise_multiplier",
                                                   noise_multiplier)
  steps = checks.check_positive_int("steps", steps)
  delta = checks.check_delta("delta", delta)
  if q == 0 or math.isinf(noise_multiplier):
    return 0.0
  delta0 = delta / 2.0 / (steps * q)
  eps_step = q * gaussian_mechanism_epsilon(noise_multiplier, min(delta0,
                                                                  0.999))
  if first_order:
    return (math.sqrt(2 * steps * math.log(2.0 / delta)) * eps_step
            + steps * eps_step ** 2)
  return advanced_composition(eps_step, 0.0, steps, delta / 2.0)[0]


def _log_group_delta_factor(epsilon: float, group_size: int) -> float:
  """log((e^{k eps} - 1) / (e^eps - 1)) = log(sum_{j<k} e^{j eps}), k >= 1."""
  if epsilon == 0:
    return math.log(group_size)
  return ((group_size - 1) * epsilon + math.log(-math.expm1(
      -group_size * epsilon)) - math.log(-math.expm1(-epsilon)))


def group_privacy_epsilon(epsilon_at_delta: Callable[[float], float],
                          group_size: int, delta: float) -> float:
  """Epsilon for groups of ``group_size`` records (e.g. one user's examples).

  Privacy contract: if a mechanism is ``(epsilon_at_delta(d), d)``-DP for
  neighbours differing in one record, for every d, it is (returned
  epsilon, ``delta``)-DP for data sets differing in ``group_size`` = k
  records (Vadhan 2017, Lemma 2.2: (eps, d)-DP implies (k eps,
  d (e^{k eps} - 1) / (e^eps - 1)) for groups of k). The d whose group
  delta is ``delta`` is found by bracketing downwards by factors of 10,
  then Brent's method; ``inf`` if no d down to ``delta`` e^-200 reaches it.
  An upper bound, loose for large k: accountants that know how the k
  records are sampled are tighter.

  Args:
    epsilon_at_delta: d -> epsilon of one record at delta d (e.g. from
      ``get_privacy_spent`` on a ledger's RDP); non-increasing in d.
    group_size: k >= 1.
    delta: The group's delta, in (0, 1).

  Returns:
    The group's epsilon (``inf`` when group privacy gives no finite one).

  Example:
    >>> group_privacy_epsilon(lambda d: 1.0, 2, 1e-5)  # 2.0 (d = 1e-5/(e+1))
  """
  k = checks.check_positive_int("group_size", group_size)
  delta = checks.check_delta("delta", delta)
  if k == 1:
    return float(epsilon_at_delta(delta))
  target = math.log(delta)

  def excess(log_d):  # log(group delta / delta); increases with log_d.
    eps = epsilon_at_delta(math.exp(log_d))
    if not math.isfinite(eps) or k * eps > 700:
      return math.inf
    return log_d + _log_group_delta_factor(eps, k) - target

  hi, lo = target, target - math.log(10)
  while excess(lo) > 0:
    if not math.isfinite(excess(lo)) or lo < target - 200:
      return math.inf
    hi, lo = lo, lo - math.log(10)
  if excess(hi) <= 0:
    return k * float(epsilon_at_delta(math.exp(hi)))
  root = optimize.brentq(excess, lo, hi, xtol=1e-10)
  return k * float(epsilon_at_delta(math.exp(root)))
