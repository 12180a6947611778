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
   compose (Zhu, Dong & Wang 2022): the composition of the discrete
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

import math
from typing import Callable, Sequence, Tuple

import numpy as np
from scipy import fft as sp_fft
from scipy import signal


# Losses beyond +-MAX_LOSS nats are not represented: above, the connect-the-
# dots construction puts the mass at +inf (pessimistic); below, it moves it
# up to -MAX_LOSS. Keeps e^loss finite and arrays bounded.
MAX_LOSS = 500.0
# Longest grid an array may span; a longer one raises ``GridTooFine``.
MAX_POINTS = 2 ** 22


class GridTooFine(ValueError):
  """The losses span more than ``MAX_POINTS`` grid points at this spacing."""


class DiscretePld:
  """A pmf on the grid ``(lo + k) h`` plus a mass at +inf (immutable)."""

  __slots__ = ("h", "lo", "pmf", "inf_mass")

  def __init__(self, h: float, lo: int, pmf: np.ndarray,
               inf_mass: float) -> None:
    self.h = float(h)
    self.lo = int(lo)
    self.pmf = np.asarray(pmf, dtype=float)
    self.inf_mass = float(min(max(inf_mass, 0.0), 1.0))

  @classmethod
  def identity(cls, h: float) -> "DiscretePld":
    """The PLD of a mechanism that releases nothing: loss 0 with mass 1."""
    return cls(h, 0, np.ones(1), 0.0)

  @classmethod
  def from_profile(cls, profile: Callable[[np.ndarray], np.ndarray],
                   eps_lo: float, eps_hi: float, h: float) -> "DiscretePld":
    """Connect-the-dots PLD of ``profile`` on the knots in [eps_lo, eps_hi].

    Args:
      profile: Vectorised eps -> delta(eps) of the pair.
      eps_lo, eps_hi: Loss range; outside it mass is moved up (see module).
      h: Grid spacing of the losses.
    """
    eps_lo = min(max(eps_lo, -MAX_LOSS), MAX_LOSS - h)
    eps_hi = min(max(eps_hi, eps_lo + h), MAX_LOSS)
    i_lo = math.floor(eps_lo / h)
    i_hi = max(math.ceil(eps_hi / h), i_lo + 1)
    if i_hi - i_lo > MAX_POINTS:
      raise GridTooFine(f"losses in [{eps_lo:.3g}, {eps_hi:.3g}] span more "
                        f"than {MAX_POINTS} points of spacing {h}.")
    knots = np.arange(i_lo, i_hi + 1) * h
    delta = profile(knots)
    a = np.exp(knots)
    slopes = np.diff(delta) / (a[:-1] * math.expm1(h))
    left = (delta[0] - 1.0) / a[0]
    slopes = np.concatenate([[left], slopes, [0.0]])
    mass = a * np.diff(slopes)
    return cls(h, i_lo, np.maximum(mass, 0.0), delta[-1])

  @property
  def losses(self) -> np.ndarray:
    return (self.lo + np.arange(len(self.pmf))) * self.h

  def truncate(self, tail_mass: float) -> "DiscretePld":
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

  def compose(self, other: "DiscretePld", tail_mass: float) -> "DiscretePld":
    """The PLD of both mechanisms run on the same data (convolution)."""
    if other.h != self.h:
      raise ValueError(f"Grids differ: h={self.h} and h={other.h}.")
    return DiscretePld(
        self.h, self.lo + other.lo, _convolve(self.pmf, other.pmf),
        1.0 - (1.0 - self.inf_mass) * (1.0 - other.inf_mass)).truncate(
            tail_mass)

  def self_compose(self, count: int, tail_mass: float) -> "DiscretePld":
    """``count`` independent copies (see ``compose_all``)."""
    return compose_all([(self, count)], tail_mass, self.h)

  def get_delta(self, epsilon: float) -> float:
    """delta(epsilon) of this PLD (exact for the discrete distribution)."""
    losses = self.losses
    above = losses > epsilon
    return self.inf_mass + float(np.sum(
        self.pmf[above] * -np.expm1(epsilon - losses[above])))

  def get_epsilon(self, delta: float) -> float:
    """Smallest epsilon >= 0 with delta(epsilon) <= ``delta``.

    With ``S1_j = sum_{k>j} pmf_k`` and the discounted tail
    ``T_j = sum_{k>j} pmf_k e^{l_j - l_k}`` (a first-order recursion, no
    overflow), ``delta(l_j) = inf_mass + S1_j - T_j``; between two grid
    points delta is ``inf_mass + S1_{j-1} - e^{eps - l_{j-1}} T_{j-1}``,
    solved for eps exactly.
    """
    if self.inf_mass > delta:
      return math.inf
    pmf, losses = self.pmf, self.losses
    decay = math.exp(-self.h)
    # tail[j] = sum_{k>=j} pmf_k decay^(k-j); T_j = decay * tail[j+1].
    tail = signal.lfilter([1.0], [1.0, -decay], pmf[::-1])[::-1]
    t = decay * np.append(tail[1:], 0.0)
    s1 = np.append(np.cumsum(pmf[::-1])[::-1][1:], 0.0)
    d_at = self.inf_mass + s1 - t
    j = int(np.argmax(d_at <= delta))
    if d_at[j] > delta:
      return math.inf  # Only if rounding left the last point above delta.
    if j == 0:  # Below l_0: delta = inf + total - e^{eps - l_0} tail[0].
      num, den, base = self.inf_mass + float(np.sum(pmf)) - delta, tail[0], (
          losses[0])
    else:
      num, den, base = self.inf_mass + s1[j - 1] - delta, t[j - 1], (
          losses[j - 1])
    eps = base + math.log(num / den) if num > 0 and den > 0 else losses[j]
    return max(min(eps, losses[j]), 0.0)


def _convolve(a, b):
  n = len(a) + len(b) - 1
  if min(len(a), len(b)) <= 32:
    return np.convolve(a, b)
  size = sp_fft.next_fast_len(n, real=True)
  out = sp_fft.irfft(sp_fft.rfft(a, size) * sp_fft.rfft(b, size), size)[:n]
  return np.maximum(out, 0.0)


def _window(items, tail_mass):
  """Grid indices [lo, hi] of the composition outside which at most
  ``tail_mass`` of its mass lies on each side, and whether each side is
  cut (False when the window reaches the end of the support).

  Chernoff: ``mass(S - mean >= b) <= total M(t) e^{-t b}`` with
  ``log M(t) = sum_e count_e log E_e[e^{t (x - mean_e)}]`` (independent
  steps), minimised over a grid of t; the window only has to be valid,
  not optimal (a wider one costs time only).
  """
  stats, mean, var, log_total = [], 0.0, 0.0, 0.0
  support_lo = support_hi = 0
  for pld, count in items:
    p = np.maximum(pld.pmf, 0.0)
    total = float(np.sum(p))
    x = np.arange(len(p), dtype=float)
    m = float(np.sum(p * x)) / total
    stats.append((np.log(np.maximum(p / total, 1e-300)), x - m, count))
    mean += count * (pld.lo + m)
    var += count * float(np.sum(p * (x - m) ** 2)) / total
    log_total += count * math.log(total)
    support_lo += count * pld.lo
    support_hi += count * (pld.lo + len(p) - 1)
  if var <= 0 or support_hi - support_lo < 64:
    return support_lo, support_hi, False, False
  ts = np.logspace(-0.5, 1.5, 8) / math.sqrt(var)
  log_mgf = np.zeros((2, len(ts)))
  for log_p, dx, count in stats:
    for side, sign in enumerate((1.0, -1.0)):
      log_mgf[side] += count * _log_sum_exp_rows(
          log_p[None, :] + (sign * ts)[:, None] * dx[None, :])
  dev = np.min((log_total + log_mgf - math.log(tail_mass)) / ts, axis=1)
  hi = int(math.ceil(mean + dev[0]))
  lo = int(math.floor(mean - dev[1]))
  return (max(lo, support_lo), min(hi, support_hi), lo > support_lo,
          hi < support_hi)


def _log_sum_exp_rows(v):
  """log(sum(exp(v), axis=1)) for a finite 2-D array (overwrites ``v``)."""
  peak = np.max(v, axis=1)
  v -= peak[:, None]
  np.exp(v, out=v)
  return peak + np.log(np.sum(v, axis=1))


def _power(z, count):
  """``z ** count`` by repeated squaring, in place (``z`` is overwritten).

  numpy's complex power goes through log and exp and is several times
  slower; the rounding error of both grows like ``count`` ulps.
  """
  result = None
  while count:
    if count & 1:
      result = z.copy() if result is None else np.multiply(result, z,
                                                           out=result)
    count >>= 1
    if count:
      np.multiply(z, z, out=z)
  return result


def _folded(pmf, size):
  """``pmf`` wrapped onto ``size`` points (for a circular convolution)."""
  if len(pmf) <= size:
    return pmf
  padded = np.zeros(-(-len(pmf) // size) * size)
  padded[:len(pmf)] = pmf
  return padded.reshape(-1, size).sum(axis=0)


def compose_all(items: Sequence[Tuple["DiscretePld", int]], tail_mass: float,
                h: float) -> "DiscretePld":
  """Composes ``(pld, count)`` pairs with one product of spectra.

  The window ``[lo, hi]`` of the composed losses is chosen by Chernoff
  bounds (``_window``) so that at most ``tail_mass`` lies beyond each end.
  The circular convolution on that window holds the true mass of every
  in-window point plus the aliased out-of-window mass (all >= 0), so
  adding the bounds on the out-of-window mass to +inf keeps every delta an
  upper bound. Repetitions are powers of the spectrum (exact).
  """
  items = [(pld, int(count)) for pld, count in items if count]
  if not items:
    return DiscretePld.identity(h)
  if any(pld.h != h for pld, _ in items):
    raise ValueError("All PLDs must share the grid spacing h.")
  finite = math.prod((1.0 - pld.inf_mass) ** count for pld, count in items)
  if finite == 0 or any(not np.any(pld.pmf > 0) for pld, _ in items):
    return DiscretePld(h, 0, np.zeros(1), 1.0)  # All mass at +inf.
  lo, hi, cut_lo, cut_hi = _window(items, tail_mass)
  if hi < lo:  # No finite loss is left in the window: all mass at +inf.
    return DiscretePld(h, 0, np.zeros(1), 1.0)
  if hi - lo > MAX_POINTS:
    raise GridTooFine(f"the composed losses span {hi - lo} points of spacing "
                      f"{h} (more than {MAX_POINTS}).")
  size = sp_fft.next_fast_len(hi - lo + 1, real=True)
  spectrum, offset = None, 0
  for pld, count in items:
    s = sp_fft.rfft(_folded(np.maximum(pld.pmf, 0.0), size), size)
    s = _power(s, count)
    spectrum = s if spectrum is None else spectrum * s
    offset += count * pld.lo
  circular = sp_fft.irfft(spectrum, size)
  window = np.maximum(np.roll(circular, -((lo - offset) % size)), 0.0)
  out_of_window = tail_mass * (int(cut_lo) + int(cut_hi))
  return DiscretePld(h, lo, window, 1.0 - finite + out_of_window).truncate(
      tail_mass)
