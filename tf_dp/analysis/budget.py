"""How many more steps fit in a privacy budget (Abadi et al.'s DPTrain).

RDP composes additively, so with the RDP curve spent so far and the RDP of
one more step, epsilon after ``k`` more steps is the conversion of
``spent + k * per_step``; it grows with ``k``, so a bisection finds the
largest ``k`` that keeps epsilon at or below the target.
"""

import numpy as np

from tf_dp.analysis import conversion


def epsilon_after(orders, spent_rdp, step_rdp, steps, delta):
  rdp = np.asarray(spent_rdp) + steps * np.asarray(step_rdp)
  if not np.any(rdp):
    return 0.0
  return conversion.get_privacy_spent(orders, rdp, target_delta=delta)[0]


def max_additional_steps(orders, spent_rdp, step_rdp, target_epsilon, delta,
                         limit=10 ** 9):
  """Largest k >= 0 with epsilon(spent + k * step) <= target (or -1 if the
  budget is already exceeded; ``limit`` if a step costs nothing)."""
  import warnings  # pylint: disable=g-import-not-at-top
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)
    if epsilon_after(orders, spent_rdp, step_rdp, 0, delta) > target_epsilon:
      return -1
    if not np.any(np.asarray(step_rdp)):
      return limit
    lo, hi = 0, 1
    while epsilon_after(orders, spent_rdp, step_rdp, hi, delta) <= (
        target_epsilon):
      lo, hi = hi, hi * 2
      if hi > limit:
        return limit
    while hi - lo > 1:
      mid = (lo + hi) // 2
      if epsilon_after(orders, spent_rdp, step_rdp, mid, delta) <= (
          target_epsilon):
        lo = mid
      else:
        hi = mid
    return lo
