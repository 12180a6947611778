"""The one search behind calibration and budget planning.

Every question of the form "the largest number of steps / batch size, or
the smallest noise multiplier, that keeps epsilon within a target" is the
boundary of a monotone predicate. ``bracket`` finds a point where the
predicate fails by doubling the distance from a known point (so it needs no
upper bound); ``monotone_boundary`` then bisects that bracket.
``calibration``, ``budget``, the compat noise search and DP dropout's
calibration all call them.
"""

from typing import Callable, Optional, Tuple

from tf_dp.analysis import checks


def bracket(predicate: Callable[[float], bool], start: float,
            limit: float) -> Tuple[float, Optional[float]]:
  """Doubles away from ``start`` until a monotone predicate fails.

  ``predicate`` must be True at ``start`` (not evaluated there) and, once
  False, False for every larger argument. Points ``start + 1, start + 2,
  start + 4, ...`` (never beyond ``limit``) are probed in turn.

  Args:
    predicate: Function of one number returning a bool.
    start: A point where the predicate holds.
    limit: The largest point ever probed.

  Returns:
    ``(lo, hi)``: the last probe where the predicate held (or ``start``)
    and the first where it failed; ``hi`` is None when it still holds at
    ``limit`` (then ``lo = limit``) or no probe fits below ``limit``.
  """
  lo, gap = start, 1
  while True:
    probe = min(start + gap, limit)
    if probe <= lo:
      return lo, None
    if not predicate(probe):
      return lo, probe
    lo = probe
    if probe >= limit:
      return lo, None
    gap *= 2


def monotone_boundary(
    predicate: Callable[[float], bool], start: float, limit: float,
    integer: bool = True, tolerance: Optional[float] = None
) -> Tuple[float, Optional[float]]:
  """Brackets the point where a monotone predicate turns from True to False.

  ``predicate`` must be True at ``start`` (not evaluated there) and, once
  False, False for every larger argument. ``bracket`` probes ``start + 1,
  start + 2, start + 4, ...`` until the predicate is False or ``limit`` is
  passed, then the bracket is bisected.

  Args:
    predicate: Function of one number returning a bool.
    start: A point where the predicate holds.
    limit: The largest point ever probed.
    integer: Search over integers (else over reals).
    tolerance: For reals, stop when ``hi - lo <= tolerance * hi`` (or
      1e-12).

  Returns:
    ``(lo, hi)``: the predicate holds at ``lo`` and fails at ``hi``; for
    integers ``hi = lo + 1``. ``hi`` is None when the predicate still
    holds at ``limit`` (then ``lo = limit``).

  Raises:
    ValueError: if a real-valued search has no valid ``tolerance``.
  """
  tol = 0.0 if integer else checks.check_tolerance("tolerance", tolerance)
  lo, hi = bracket(predicate, start, limit)
  if hi is None:
    return lo, None
  while (hi - lo > 1) if integer else (hi - lo > max(tol * hi, 1e-12)):
    mid = (lo + hi) // 2 if integer else (lo + hi) / 2
    if predicate(mid):
      lo = mid
    else:
      hi = mid
  return lo, hi
