"""RDP of the Gaussian mechanism on fixed-size samples drawn without replacement.

Wang, Balle & Kasiviswanathan (2019), "Subsampled Renyi differential privacy
and analytical moments accountant", Theorem 9: if a mechanism M has RDP
``eps(j)`` on its input of ``m`` records, then running it on a uniformly
random size-``m`` subset of ``n`` records (``gamma = m / n``) satisfies, for
integer ``alpha >= 2``,

    (alpha - 1) eps'(alpha) <= log(1 + gamma^2 C(alpha,2) min(4(e^eps(2) - 1),
                                      e^eps(2) min(2, (e^eps(inf) - 1)^2))
                                  + sum_{j=3}^{alpha} gamma^j C(alpha,j)
                                      e^{(j-1) eps(j)} min(2, (e^eps(inf)-1)^j)).

For the Gaussian mechanism ``eps(inf) = inf``, so both inner minima are 2.

Neighbouring relation: replace one record. Replacing a record changes the
sum of clipped contributions by up to ``2C``, so with noise stddev
``noise_multiplier * C`` the base mechanism has
``eps(j) = j * (2C)^2 / (2 (noise_multiplier C)^2) = 2 j / noise_multiplier^2``.
(Libraries that take the noise multiplier relative to the replace-one
sensitivity instead report the same number for ``noise_multiplier / 2``.)

Fractional orders are bounded by linear interpolation of ``(alpha-1) eps'``
between neighbouring integers, valid because that function is convex.
The result is also capped by the base mechanism's RDP (subsampling never
costs privacy: Renyi divergence is jointly quasi-convex).

Not implemented: the sharper Gaussian-specific bound of Theorem 27 in the
full version (arXiv:1808.00087), which replaces the j >= 3 terms by forward
differences of exp((l-1) eps(l)). It only matters at large sampling ratios
(e.g. q = 0.5); there this module's bound is valid but up to ~20% higher
(tests pin both facts against dp_accounting).
"""

import math

import numpy as np
from scipy import special

from tf_dp.analysis import _validation


def _log_binom(n, k):
  return (special.gammaln(n + 1) - special.gammaln(k + 1)
          - special.gammaln(n - k + 1))


def _cgf_int(gamma, noise_multiplier, alpha):
  """Upper bound on (alpha - 1) * eps'(alpha) for an integer alpha >= 2."""
  base = lambda j: 2.0 * j / noise_multiplier ** 2
  if alpha == 1:
    return 0.0
  base_cgf = (alpha - 1) * base(alpha)
  if gamma == 1.0:
    return base_cgf
  log_gamma = math.log(gamma)
  eps2 = base(2)
  # Second-order term: min(4 (e^eps2 - 1), 2 e^eps2).
  log_second = min(math.log(4.0) + eps2 + math.log(-math.expm1(-eps2)),
                   math.log(2.0) + eps2)
  terms = [0.0, 2 * log_gamma + _log_binom(alpha, 2) + log_second]
  if alpha >= 3:
    j = np.arange(3, alpha + 1, dtype=float)
    terms.extend(math.log(2.0) + j * log_gamma + _log_binom(alpha, j)
                 + (j - 1.0) * base(j))
  return min(float(special.logsumexp(terms)), base_cgf)


def compute_rdp_sample_without_replacement(q, noise_multiplier, steps,
                                           orders=None):
  """RDP of ``steps`` Gaussian sums on fixed-size samples without replacement.

  Privacy contract: valid for replace-one neighbouring datasets when each
  step draws a uniformly random subset of ``q * n`` records, clips each
  contribution to L2 norm ``C`` and adds N(0, (noise_multiplier*C)^2 I) to
  the sum (sensitivity ``2C``; see the module docstring).

  Args:
    q: Sampling ratio ``batch_size / n`` in [0, 1].
    noise_multiplier: Noise stddev divided by the clip norm, > 0.
    steps: Number of steps, integer >= 0.
    orders: Renyi orders > 1; the package default if None.

  Returns:
    Array of RDP values, one per order.
  """
  from tf_dp.analysis import rdp as rdp_lib  # pylint: disable=g-import-not-at-top
  q = _validation.check_probability("q", q)
  noise_multiplier = _validation.check_noise_multiplier(
      "noise_multiplier", noise_multiplier)
  steps = _validation.check_steps("steps", steps)
  orders = rdp_lib._orders_array(orders)  # pylint: disable=protected-access
  out = np.empty(len(orders))
  if math.isinf(noise_multiplier):  # Infinite noise releases nothing.
    return np.zeros(len(orders))
  for i, alpha in enumerate(orders):
    if q == 0:
      out[i] = 0.0
    elif math.isinf(alpha):
      out[i] = np.inf
    elif float(alpha).is_integer():
      out[i] = _cgf_int(q, noise_multiplier, int(alpha)) / (alpha - 1)
    else:
      lo, hi = math.floor(alpha), math.ceil(alpha)
      c_lo = _cgf_int(q, noise_multiplier, lo)
      c_hi = _cgf_int(q, noise_multiplier, hi)
      out[i] = ((hi - alpha) * c_lo + (alpha - lo) * c_hi) / (alpha - 1)
      out[i] = min(out[i], 2.0 * alpha / noise_multiplier ** 2)
  return out * steps
