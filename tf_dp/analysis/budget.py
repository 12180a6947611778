"""How many more steps fit in a privacy budget (Abadi et al.'s DPTrain).

Epsilon after ``k`` more steps grows with ``k`` under either accountant, so
``search.monotone_boundary`` (doubling, then bisection) finds the largest
``k`` that keeps epsilon at or below the target.

* ``max_additional_steps_for_events``: from plain events (the ledger's
  ``LedgerEvent`` runs, or ``pld.GaussianEvent``s) with the ``"pld"``
  (default) or ``"rdp"`` accountant. This is what a budget callback calls.
* ``max_additional_steps``: the RDP form on precomputed RDP curves
  (``spent + k * per_step``, RDP composes additively).
"""

import math
import warnings
from typing import Any, Iterable, Optional, Tuple

import numpy as np

from tf_dp.analysis import checks
from tf_dp.analysis import conversion
from tf_dp.analysis import dp_sgd_privacy as privacy_lib
from tf_dp.analysis import event_accounting
from tf_dp.analysis import search


def epsilon_after(
    orders: checks.FloatArray, spent_rdp: checks.FloatArray,
    step_rdp: checks.FloatArray, steps: int, delta: float) -> float:
  """RDP epsilon of ``spent + steps * step`` at ``delta``."""
  rdp = np.asarray(spent_rdp) + steps * np.asarray(step_rdp)
  if not np.any(rdp):
    return 0.0
  return conversion.get_privacy_spent(orders, rdp, target_delta=delta)[0]


def _largest_k(epsilon_of, target_epsilon, step_is_free, limit):
  """-1 if epsilon_of(0) > target; ``limit`` if a step is free; else the
  largest k <= limit with epsilon_of(k) <= target."""
  if epsilon_of(0) > target_epsilon:
    return -1
  if step_is_free:
    return limit
  lo, _ = search.monotone_boundary(
      lambda k: epsilon_of(k) <= target_epsilon, start=0, limit=limit)
  return lo


def max_additional_steps(
    orders: checks.FloatArray, spent_rdp: checks.FloatArray,
    step_rdp: checks.FloatArray, target_epsilon: float, delta: float,
    limit: int = 10 ** 9) -> int:
  """Largest k >= 0 with epsilon(spent + k * step) <= target (RDP curves).

  Returns -1 if the budget is already exceeded and ``limit`` if a step
  costs nothing.
  """
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)
    return _largest_k(
        lambda k: epsilon_after(orders, spent_rdp, step_rdp, k, delta),
        target_epsilon, not np.any(np.asarray(step_rdp)), limit)


def max_additional_steps_for_events(events: Iterable[Tuple[Any, int]],
                                    next_event: Any, target_epsilon: float,
                                    delta: float,
                                    accountant: Optional[str] = None,
                                    orders: Optional[checks.FloatArray] = None,
                                    limit: int = 10 ** 9) -> int:
  """Largest k >= 0 such that ``events`` plus k x ``next_event`` fit.

  Privacy contract: composing the recorded events and k more steps of
  ``next_event`` gives epsilon <= ``target_epsilon`` at ``delta`` by the
  chosen accountant, the same number ``compute_epsilon_from_ledger`` will
  report for that ledger.

  Args:
    events: The events so far: ``LedgerEvent``s (``ledger_events``) or
      ``(LedgerEvent, count)`` runs (``ledger_event_runs``).
    next_event: The ``LedgerEvent`` of one more step.
    target_epsilon: The budget, >= 0.
    delta: The delta of the budget, in (0, 1).
    accountant: ``"pld"``, ``"rdp"`` or None (``"pld"`` unless ``orders``).
    orders: RDP only: Renyi orders.
    limit: The largest answer returned.

  Returns:
    k; -1 if ``events`` alone exceed the target; ``limit`` if a step of
    ``next_event`` costs nothing.

  Example:
    >>> step = LedgerEvent("poisson", 0.01, 1.1, 60000, 1)
    >>> k = max_additional_steps_for_events([], step, 2.0, 1e-5)
  """
  target_epsilon = checks.check_epsilon("target_epsilon", target_epsilon)
  runs = [e if isinstance(e, tuple) and len(e) == 2
          and not hasattr(e, "_fields") else (e, 1) for e in events]
  accountant = privacy_lib.resolve_accountant(accountant, orders=orders)
  free = (math.isinf(next_event.noise_multiplier)
          or next_event.sampling_probability == 0)

  def epsilon_of(k):
    return event_accounting.epsilon_of_runs(
        runs + [(next_event, k)], delta, orders=orders,
        accountant=accountant)[0]

  return _largest_k(epsilon_of, target_epsilon, free, limit)
