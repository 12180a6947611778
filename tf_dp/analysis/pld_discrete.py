r"""Discrete privacy loss distributions: pessimistic discretisation and FFT.

A discrete PLD is a sub-probability mass function on the grid
``l_k = (lo + k) h`` plus a mass at ``+inf`` (outputs that the neighbouring
dataset cannot produce). Its privacy profile is

    delta(eps) = inf_mass + sum_k pmf_k (1 - e^{eps - l_k})_+.

Why every number here is an upper bound on the true delta (Meiser &
Mohammadi 2018, "Tight on budget?"; Koskela, Jalko & Honkela 2020, "Computing
tight differential privacy guarantees using FFT"; Doroshenko, Ghazi, Kamath,
Kumar & Manurangsi 2022, "Connect the dots: tighter discrete approximations
of privacy loss distributions"):

1. *Connect the dots* (``from_profile``). As a function of ``a = e^eps`` the
   profile of any pair is convex (a hockey-stick divergence), equals 1 at
   ``a = 0`` and is non-increasing. Its chords between the grid points
   ``a_i = e^{i h}``, extended by the chord from ``(0, 1)`` on the left and by
   the constant ``delta(eps_hi)`` on the right, lie on or above it. That
   piecewise-linear convex curve is exactly the profile of a discrete PLD
   with mass ``a_i (s_i - s_{i-1})`` at ``l_i = i h`` (``s_i`` the chord
   slopes) and ``delta(eps_hi)`` at +inf; it is a valid PLD of some pair
   because ``sum_i mass_i e^{-l_i} = (1 - delta(eps_lo)) / a_lo <= 1``
   (``H_a >= 1 - a``). Its profile dominates the true one for *every* ``a``,
   so the discrete pair dominates the mechanism, and dominating pairs
   compose (Zhu, Dong & Wang 2022, Thm. 10): the composition of the discrete
   PLDs bounds the composition of the mechanisms.
2. *Composition* is the convolution of the pmfs (losses add, independent
   steps); the infinite masses combine as ``1 - prod(1 - inf_mass)``.
3. *Truncation* after a convolution only ever moves mass *up* in loss: the
   lower tail (total mass <= ``tail_mass``) is moved onto the lowest kept
   point, the upper tail onto +inf. The composed delta is
   ``E[(1 - e^{eps - S})_+]`` for ``S`` the sum of independent losses,
   non-decreasing in each loss, so moving mass up (a coupling with
   ``L' >= L``) can only increase every later delta: still an upper bound.

Floating-point rounding (FFT noise of ~1e-16 times the largest mass, chord
slopes from differences of nearby normal tails) is not covered by this
argument; negative FFT noise is clipped to 0. Its effect on delta is below
1e-12 on the workloads tested.
"""

import heapq
import math

import numpy as np
from scipy import fft as sp_fft
from scipy import special


class DiscretePld:
  """A pmf on the grid ``(lo + k) h`` plus a mass at +inf (immutable)."""

  __slots__ = ("h", "lo", "pmf", "inf_mass")

  def __init__(self, h, lo, pmf, inf_mass):
    self.h = float(h)
    self.lo = int(lo)
    self.pmf = np.asarray(pmf, dtype=float)
    self.inf_mass = float(min(max(inf_mass, 0.0), 1.0))

  @classmethod
  def identity(cls, h):
    """The PLD of a mechanism that releases nothing: loss 0 with mass 1."""
    return cls(h, 0, np.ones(1), 0.0)

  @classmethod
  def from_profile(cls, profile, eps_lo, eps_hi, h):
    """Connect-the-dots PLD of ``profile`` on the knots in [eps_lo, eps_hi].

    Args:
      profile: Vectorised eps -> delta(eps) of the pair.
      eps_lo, eps_hi: Loss range; outside it mass is moved up (see module).
      h: Grid spacing of the losses.
    """
    i_lo = math.floor(eps_lo / h)
    i_hi = max(math.ceil(eps_hi / h), i_lo + 1)
    knots = np.arange(i_lo, i_hi + 1) * h
    delta = profile(knots)
    a = np.exp(knots)
    slopes = np.diff(delta) / (a[:-1] * math.expm1(h))
    left = (delta[0] - 1.0) / a[0]
    slopes = np.concatenate([[left], slopes, [0.0]])
    mass = a * np.diff(slopes)
    return cls(h, i_lo, np.maximum(mass, 0.0), delta[-1])

  @property
  def losses(self):
    return (self.lo + np.arange(len(self.pmf))) * self.h

  def truncate(self, tail_mass):
    """Moves the lower tail up and the upper tail to +inf (pessimistic)."""
    pmf = np.maximum(self.pmf, 0.0)
    below = np.cumsum(pmf)
    start = int(np.searchsorted(below, tail_mass, side="right"))
    above = np.cumsum(pmf[::-1])
    stop = len(pmf) - int(np.searchsorted(above, tail_mass, side="right"))
    if start >= stop:  # Everything is tail: keep the whole array.
      return DiscretePld(self.h, self.lo, pmf, self.inf_mass)
    kept = pmf[start:stop].copy()
    if start:
      kept[0] += below[start - 1]
    moved_to_inf = above[len(pmf) - stop - 1] if stop < len(pmf) else 0.0
    return DiscretePld(self.h, self.lo + start, kept,
                       self.inf_mass + moved_to_inf)

  def compose(self, other, tail_mass):
    """The PLD of both mechanisms run on the same data (convolution)."""
    if other.h != self.h:
      raise ValueError(f"Grids differ: h={self.h} and h={other.h}.")
    return DiscretePld(
        self.h, self.lo + other.lo, _convolve(self.pmf, other.pmf),
        1.0 - (1.0 - self.inf_mass) * (1.0 - other.inf_mass)).truncate(
            tail_mass)

  def self_compose(self, count, tail_mass):
    """``count`` independent copies: the count-th power of the spectrum.

    The window ``[a, b]`` of the sum is chosen by Chernoff bounds on this
    pmf's moment generating function, ``P(S >= b) <= M(t)^count e^{-t b}``
    (and likewise below), each at most ``tail_mass``. The circular
    convolution on that window holds the true mass of every in-window point
    plus the aliased out-of-window mass (all >= 0), so adding the bounds on
    the out-of-window mass to +inf keeps every delta an upper bound.
    """
    count = int(count)
    if count == 0:
      return DiscretePld.identity(self.h)
    if count == 1 or len(self.pmf) == 1:
      return self._power_by_squaring(count, tail_mass)
    pmf = np.maximum(self.pmf, 0.0)
    k = np.arange(len(pmf), dtype=float)
    lo_k, hi_k = _chernoff_window(pmf, k, count, tail_mass)
    if (hi_k - lo_k + 1) * 4 < len(pmf):  # Window too short to bother.
      return self._power_by_squaring(count, tail_mass)
    size = sp_fft.next_fast_len(hi_k - lo_k + 1, real=True)
    spectrum = sp_fft.rfft(pmf, size)
    circular = sp_fft.irfft(spectrum ** count, size)
    window = np.maximum(np.roll(circular, -(lo_k % size)), 0.0)
    out_of_window = 2.0 * tail_mass
    finite = (1.0 - self.inf_mass) ** count
    return DiscretePld(self.h, count * self.lo + lo_k, window,
                       1.0 - finite + out_of_window).truncate(tail_mass)

  def _power_by_squaring(self, count, tail_mass):
    result, power = None, self
    while count:
      if count & 1:
        result = power if result is None else result.compose(power, tail_mass)
      count >>= 1
      if count:
        power = power.compose(power, tail_mass)
    return result if result is not None else DiscretePld.identity(self.h)

  def get_delta(self, epsilon):
    """delta(epsilon) of this PLD (exact for the discrete distribution)."""
    losses = self.losses
    above = losses > epsilon
    return self.inf_mass + float(np.sum(
        self.pmf[above] * -np.expm1(epsilon - losses[above])))

  def get_epsilon(self, delta):
    """Smallest epsilon >= 0 with delta(epsilon) <= ``delta``."""
    if self.inf_mass > delta:
      return math.inf
    losses = self.losses
    # Tail sums above each grid point: delta(l_j) = inf + S1_j - e^{l_j} S2_j.
    s1 = np.cumsum(self.pmf[::-1])[::-1]
    s2 = np.cumsum((self.pmf * np.exp(-losses))[::-1])[::-1]
    s1 = np.append(s1[1:], 0.0)
    s2 = np.append(s2[1:], 0.0)
    d_at = self.inf_mass + s1 - np.exp(losses) * s2
    j = int(np.argmax(d_at <= delta))  # d_at is non-increasing in j.
    if d_at[j] > delta:
      return math.inf  # Unreachable: the last point has delta = inf_mass.
    if j == 0:
      eps = losses[0] if d_at[0] <= delta else math.inf
      # Below the first point delta(eps) = inf + S - e^eps S', S = total.
      total, total_w = float(np.sum(self.pmf)), float(
          np.sum(self.pmf * np.exp(-losses)))
      if total_w > 0 and self.inf_mass + total - delta > 0:
        eps = math.log((self.inf_mass + total - delta) / total_w)
      return max(eps, 0.0)
    # Between l_{j-1} and l_j: delta(eps) = inf + S1_{j-1} - e^eps S2_{j-1}.
    eps = math.log((self.inf_mass + s1[j - 1] - delta) / s2[j - 1])
    return max(min(eps, losses[j]), 0.0)


def _convolve(a, b):
  n = len(a) + len(b) - 1
  if min(len(a), len(b)) <= 32:
    return np.convolve(a, b)
  size = sp_fft.next_fast_len(n, real=True)
  out = sp_fft.irfft(sp_fft.rfft(a, size) * sp_fft.rfft(b, size), size)[:n]
  return np.maximum(out, 0.0)


def _chernoff_window(pmf, k, count, tail_mass):
  """Grid indices [lo, hi] of the count-fold sum outside which the mass on
  each side is at most ``tail_mass``.

  Chernoff: ``P(S >= b) <= M(t)^count e^{-t b}`` for the pmf's moment
  generating function M (grid units), minimised over a grid of t; the
  window only has to be valid, not optimal (a wider one costs time only).
  """
  keep = pmf > 0
  p, x = pmf[keep], k[keep]
  total = float(np.sum(p))
  mean = float(np.sum(p * x)) / total
  spread = math.sqrt(max(float(np.sum(p * (x - mean) ** 2)) / total, 1e-12))
  log_tail = math.log(tail_mass) - count * math.log(total)
  ts = np.logspace(-2, 1.5, 24) / (spread * math.sqrt(count))
  dx = x - mean
  upper, lower = math.inf, math.inf
  for t in ts:
    for sign in (1.0, -1.0):
      e = sign * t * dx
      peak = float(np.max(e))
      log_mgf = peak + math.log(float(np.sum(p * np.exp(e - peak))) / total)
      bound = (count * log_mgf - log_tail) / t  # deviation from the mean
      if sign > 0:
        upper = min(upper, bound)
      else:
        lower = min(lower, bound)
  hi = int(math.ceil(min(count * mean + upper, count * float(x[-1]))))
  lo = int(math.floor(max(count * mean - lower, count * float(x[0]))))
  return lo, hi


def compose_all(plds, tail_mass, h):
  """Composes ``(pld, count)`` pairs: powers first, then smallest-first."""
  heap = []
  for i, (pld, count) in enumerate(plds):
    if count:
      power = pld.self_compose(count, tail_mass)
      heapq.heappush(heap, (len(power.pmf), i, power))
  if not heap:
    return DiscretePld.identity(h)
  tie = len(plds)
  while len(heap) > 1:
    _, _, a = heapq.heappop(heap)
    _, _, b = heapq.heappop(heap)
    c = a.compose(b, tail_mass)
    heapq.heappush(heap, (len(c.pmf), tie, c))
    tie += 1
  return heap[0][2]
