"""Renyi DP of the Poisson-subsampled Gaussian mechanism.

The mechanism: each record is selected independently with probability ``q``;
the selected records, each clipped to L2 norm ``C``, are summed; Gaussian
noise of stddev ``noise_multiplier * C`` is added to the sum. Neighbouring
datasets differ by adding or removing one record (sensitivity ``C``).

Mironov, Talwar & Zhang (2019), "Renyi Differential Privacy of the Sampled
Gaussian Mechanism", show that its RDP at order ``alpha`` is
``log(A_alpha) / (alpha - 1)`` with

    A_alpha = E_{z ~ mu0} [ ((1 - q) + q * mu1(z) / mu0(z)) ** alpha ]

where ``mu0 = N(0, s^2)`` and ``mu1 = N(1, s^2)`` (``s`` the noise
multiplier). This module computes ``A_alpha - 1`` directly so that tiny
values of the RDP keep their relative precision:

* integer orders: the exact binomial expansion
  ``A - 1 = sum_{k>=2} C(alpha,k) q^k (1-q)^(alpha-k) expm1((k^2-k)/(2 s^2))``,
  every term positive, summed in log space;
* fractional orders: ``A - 1 = E_{mu0}[(1 + u)^alpha - 1 - alpha u]`` with
  ``u = q * expm1((2z - 1) / (2 s^2))`` (the linear term has zero mean).
  The integrand is non-negative and analytic in a strip of half-width
  ``pi s^2``, so the trapezoid rule converges exponentially fast; the step is
  chosen well inside that strip. The integrand is evaluated in log space
  (``log(1 + u) = logaddexp(log(1 - q), log(q) + t)``), so large
  ``alpha / s^2`` (order 1024 at ``s = 0.1``) cannot overflow. Tests compare
  it with an mpmath integration. A fractional order that would need more
  than 2 * 10^6 points (e.g. order 3.5 below ``s ~ 0.0024``) is refused
  with a ``ValueError``; integer orders are exact for every ``s > 0``.

Infinite noise releases nothing: its RDP is 0 at every order.

All functions are pure numpy/scipy and vectorised over noise multipliers,
so long heterogeneous ledgers are accounted quickly.
"""

import math
from typing import Dict, Iterable, Optional, Tuple

import numpy as np
from scipy import special

from tf_dp.analysis import checks

# Orders used when the caller gives none: dense where DP-SGD optima usually
# lie, sparse above, up to 1024 for very small epsilon.
DEFAULT_ORDERS = tuple(
    [1.1, 1.25, 1.5, 1.75, 2.0, 2.25, 2.5, 2.75, 3.0, 3.5, 4.0, 4.5]
    + [float(x) for x in range(5, 64)]
    + [80.0, 96.0, 128.0, 192.0, 256.0, 512.0, 1024.0])

_TAYLOR_TERMS = 12  # (1+u)^a - 1 - a u by its series when |u| < 0.01.
# Fractional orders: at most this many trapezoid points per noise multiplier
# (beyond it a ValueError asks for integer orders), and per chunk of rows.
_MAX_FRAC_GRID_POINTS = 2_000_000
_FRAC_GRID_ELEMS = 4_000_000


def _log_expm1(y):
  """log(exp(y) - 1) for y > 0, stable for large and tiny y."""
  return y + np.log(-np.expm1(-y))


def _int_order_layout(int_orders):
  """Flat (order, k) index of all binomial terms k = 2..alpha per order."""
  ks, log_binoms, starts = [], [], []
  pos = 0
  for alpha in int_orders:
    k = np.arange(2, alpha + 1, dtype=float)
    starts.append(pos)
    pos += len(k)
    ks.append(k)
    log_binoms.append(special.gammaln(alpha + 1) - special.gammaln(k + 1)
                      - special.gammaln(alpha - k + 1))
  alphas = np.repeat(np.asarray(int_orders, dtype=float),
                     [int(a) - 1 for a in int_orders])
  return (np.concatenate(ks), np.concatenate(log_binoms), alphas,
          np.asarray(starts))


def _log_a_minus_1_int_orders(q, sigmas, int_orders, chunk_elems=4_000_000):
  """log(A_alpha - 1) for integer orders: exact sums, all terms positive.

  Every (order, k) term is laid out in one flat vector so that all orders
  are summed in one pass; rows are noise multipliers, processed in chunks.
  Returns an array of shape (len(sigmas), len(int_orders)).
  """
  k, log_binom, alphas, starts = _int_order_layout(int_orders)
  base = log_binom + k * math.log(q) + (alphas - k) * math.log1p(-q)
  half_kk = (k * k - k) / 2.0
  out = np.empty((len(sigmas), len(int_orders)))
  rows = max(1, chunk_elems // len(k))
  for lo in range(0, len(sigmas), rows):
    inv_var = 1.0 / sigmas[lo:lo + rows, None] ** 2
    terms = base + _log_expm1(half_kk * inv_var)
    peak = np.maximum.reduceat(terms, starts, axis=1)
    shifted = np.exp(terms - np.repeat(peak, np.diff(np.append(starts, len(k))),
                                       axis=1))
    out[lo:lo + rows] = peak + np.log(np.add.reduceat(shifted, starts, axis=1))
  return out


def _log_g(t, q, alpha):
  """log((1+u)^alpha - 1 - alpha*u) with u = q*expm1(t), elementwise.

  Evaluated in log space: ``log(1+u) = logaddexp(log(1-q), log(q) + t)`` and
  ``log(u) = log(q) + log(expm1(t))`` never overflow, so large
  ``alpha * t`` (large orders, small noise) stays finite. Requires 0 < q < 1.
  """
  log1pu = np.logaddexp(math.log1p(-q), math.log(q) + t)
  big_l = alpha * log1pu  # log((1+u)^alpha)
  u = q * np.expm1(np.minimum(t, 700.0))  # exact wherever it is used below
  small = np.abs(u) < 0.01
  # Taylor branch: sum_{k>=2} C(alpha, k) u^k, all terms summed directly.
  us = np.where(small, u, 0.0)
  series = np.zeros_like(u)
  coef = alpha
  power = us.copy()
  for k in range(2, _TAYLOR_TERMS + 2):
    coef *= (alpha - k + 1) / k
    power = power * us
    series += coef * power
  moderate = big_l < 1.0  # then u < e^(1/alpha) - 1: u is exact
  # Tail (big_l >= 1, so u > 0): L + log(1 - (1 + alpha u) e^-L).
  tpos = np.where(moderate | small, 1.0, t)
  log_1_alpha_u = np.logaddexp(
      0.0, math.log(alpha) + math.log(q) + _log_expm1(tpos))
  with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
    log_small = np.log(np.maximum(series, 0.0))
    direct = np.log(np.maximum(
        np.expm1(np.where(moderate, big_l, 0.0)) - alpha * u, 0.0))
    tail = big_l + np.log1p(-np.exp(log_1_alpha_u - big_l))
  return np.where(small, log_small, np.where(moderate, direct, tail))


def _frac_grid_points(sigmas, alpha):
  """Trapezoid points for each noise multiplier (see _log_a_minus_1_frac)."""
  step = np.minimum(sigmas / 3.0, math.pi * sigmas ** 2 / 8.0)
  return np.maximum(np.ceil((alpha + 22.0 * sigmas) / step) + 1, 64)


def _log_a_minus_1_frac(q, sigmas, alpha):
  """log(A_alpha - 1) for a fractional order by trapezoid quadrature.

  The grid step is well inside the analyticity strip (pi s^2) and the
  Gaussian width (s); the range covers both bumps (z ~ 0 and z ~ alpha).
  Rows are processed in chunks of at most _FRAC_GRID_ELEMS grid values.
  """
  n_points = int(np.max(_frac_grid_points(sigmas, alpha)))
  out = np.empty(len(sigmas))
  rows = max(1, _FRAC_GRID_ELEMS // n_points)
  grid = np.linspace(0.0, 1.0, n_points)
  for lo_row in range(0, len(sigmas), rows):
    s = sigmas[lo_row:lo_row + rows, None]
    lo, hi = -11.0 * s, alpha + 11.0 * s
    z = lo + (hi - lo) * grid[None, :]
    h = (hi[:, 0] - lo[:, 0]) / (n_points - 1)
    t = (2.0 * z - 1.0) / (2.0 * s * s)
    log_density = -z * z / (2.0 * s * s) - np.log(s * math.sqrt(2 * math.pi))
    out[lo_row:lo_row + rows] = (
        special.logsumexp(_log_g(t, q, alpha) + log_density, axis=1)
        + np.log(h))
  return out


def _check_frac_grid(sigmas, orders):
  """Refuses fractional orders whose quadrature would exceed the budget."""
  for alpha in orders:
    if math.isinf(alpha) or float(alpha).is_integer():
      continue
    points = _frac_grid_points(sigmas, alpha)
    worst = int(np.argmax(points))
    if points[worst] > _MAX_FRAC_GRID_POINTS:
      raise ValueError(
          f"orders contains the fractional order {float(alpha)!r}, whose "
          f"RDP at noise_multiplier={float(sigmas[worst])!r} needs "
          f"{int(points[worst])} quadrature points (at most "
          f"{_MAX_FRAC_GRID_POINTS}); use integer orders there (exact at "
          "any order and noise_multiplier) or a smaller fractional order.")


def _rdp_per_step_finite(q, sigmas, orders):
  """``_rdp_per_step`` for finite noise multipliers and 0 < q < 1."""
  out = np.zeros((len(sigmas), len(orders)))
  is_int = np.array([not math.isinf(a) and float(a).is_integer()
                     for a in orders])
  out[:, np.isinf(orders)] = np.inf
  if np.any(is_int):
    int_orders = [int(a) for a in orders[is_int]]
    log_am1 = _log_a_minus_1_int_orders(q, sigmas, int_orders)
    out[:, is_int] = (np.logaddexp(0.0, log_am1)
                      / (np.asarray(int_orders, dtype=float) - 1.0))
  for j, alpha in enumerate(orders):
    if not is_int[j] and not math.isinf(alpha):
      log_am1 = _log_a_minus_1_frac(q, sigmas, alpha)
      out[:, j] = np.logaddexp(0.0, log_am1) / (alpha - 1.0)
  return out


def _rdp_per_step(q, sigmas, orders):
  """RDP of one step, shape (len(sigmas), len(orders)).

  Infinite noise multipliers release nothing (RDP 0 at every order).
  """
  sigmas = np.asarray(sigmas, dtype=float)
  out = np.zeros((len(sigmas), len(orders)))
  finite = np.isfinite(sigmas)
  if q == 0 or not np.any(finite):
    return out
  sub = sigmas[finite]
  if q == 1.0:
    with np.errstate(invalid="ignore"):
      rows = np.where(np.isinf(orders), np.inf,
                      orders[None, :] / (2.0 * sub[:, None] ** 2))
  else:
    _check_frac_grid(sub, orders)
    rows = _rdp_per_step_finite(q, sub, orders)
  if np.any(np.isnan(rows)):  # A numerical failure: never return NaN.
    raise ValueError(
        f"RDP could not be computed for q={q!r}, noise_multiplier in "
        f"{sub.tolist()!r}, orders {orders.tolist()!r}; please report this "
        "with the arguments (integer orders are exact everywhere).")
  out[finite] = rows
  return out


def _orders_array(orders):
  """``orders`` (the default list if None) validated by ``check_orders``."""
  return checks.check_orders(DEFAULT_ORDERS if orders is None
                             else orders)


def compute_rdp(sampling_probability: float, noise_multiplier: float,
                steps: int,
                orders: Optional[checks.FloatArray] = None) -> np.ndarray:
  """RDP of ``steps`` compositions of the Poisson-subsampled Gaussian.

  Privacy contract: valid for add/remove-one neighbouring datasets when each
  record is included independently with probability
  ``q = sampling_probability``, its contribution
  is clipped to L2 norm ``C``, and N(0, (noise_multiplier*C)^2 I) is added
  once to the sum of the sample.

  Args:
    sampling_probability: q, the probability that a record is in a lot,
      in [0, 1].
    noise_multiplier: Ratio of the noise stddev to the L2 clip norm, > 0
      (``inf`` releases nothing: RDP 0).
    steps: Number of compositions, integer >= 0.
    orders: Renyi orders > 1 (``inf`` allowed); ``DEFAULT_ORDERS`` if None.

  Returns:
    A numpy array of RDP values, one per order (never NaN).

  Raises:
    ValueError: on an argument outside its domain (named in the message),
      or a fractional order too large for the quadrature at this noise
      multiplier (see the module docstring; use integer orders there).

  Example:
    >>> rdp = compute_rdp(0.01, 4.0, 10000, [2, 32])
  """
  q = checks.check_sampling_probability("sampling_probability",
                                        sampling_probability)
  noise_multiplier = checks.check_noise_multiplier(
      "noise_multiplier", noise_multiplier)
  steps = checks.check_steps("steps", steps)
  orders = _orders_array(orders)
  if steps == 0:  # Nothing released (and no inf * 0 at order inf).
    return np.zeros(len(orders))
  return _rdp_per_step(q, np.array([noise_multiplier]), orders)[0] * steps


def compute_heterogeneous_rdp(
    events: Iterable[Tuple[float, float, int]],
    orders: Optional[checks.FloatArray] = None) -> np.ndarray:
  """RDP of a composition of differently parameterised Gaussian steps.

  Args:
    events: Iterable of ``(sampling_probability, noise_multiplier,
      steps)`` triples, each a Poisson-subsampled Gaussian repeated
      ``steps`` times.
    orders: Renyi orders; ``DEFAULT_ORDERS`` if None.

  Returns:
    Array of total RDP per order (the sum over events: RDP composes
    additively at every order).
  """
  orders = _orders_array(orders)
  groups: Dict[float, Dict[float, int]] = {}
  for i, event in enumerate(events):
    if not isinstance(event, (tuple, list)) or len(event) != 3:
      raise ValueError(f"events[{i}] must be a (sampling_probability, "
                       f"noise_multiplier, steps) triple; got {event!r}.")
    q, noise_multiplier, steps = event
    q = checks.check_sampling_probability("sampling_probability", q)
    sigma = checks.check_noise_multiplier(
        "noise_multiplier", noise_multiplier)
    steps = checks.check_steps("steps", steps)
    by_sigma = groups.setdefault(q, {})
    by_sigma[sigma] = by_sigma.get(sigma, 0) + steps
  total = np.zeros(len(orders))
  for q, by_sigma in groups.items():
    sigmas = np.fromiter(by_sigma.keys(), dtype=float)
    counts = np.fromiter(by_sigma.values(), dtype=float)
    per_step = _rdp_per_step(q, sigmas, orders)
    with np.errstate(invalid="ignore"):
      contrib = np.where(counts[:, None] > 0, per_step * counts[:, None], 0.0)
    total += np.sum(contrib, axis=0)
  return total
