"""Budget planning: how many more steps fit (tf_dp.analysis.budget)."""

import numpy as np
import pytest

from tf_dp import analysis
from tf_dp.analysis import event_accounting
from tf_dp.analysis.ledger import LedgerEvent

# Pure Python accounting: one stack runs each case (tests/conftest.py).
pytestmark = pytest.mark.stack_independent

STEP = LedgerEvent("poisson", 0.01, 1.1, 60000, 1)
FIXED = LedgerEvent("fixed_size", 0.25, 2.0, 64, 1)


def epsilon(runs, accountant):
  return event_accounting.epsilon_of_runs(runs, 1e-5,
                                          accountant=accountant)[0]


@pytest.mark.parametrize("accountant", ["pld", "rdp"])
@pytest.mark.parametrize("spent,step,target", [
    ([], STEP, 1.0), ([(STEP, 500)], STEP, 2.0),
    ([(STEP, 100)], LedgerEvent("poisson", 0.02, 2.0, 60000, 1), 1.5),
    ([FIXED], FIXED, 10.0)])
def test_largest_k_is_exact(accountant, spent, step, target):
  k = analysis.max_additional_steps_for_events(spent, step, target, 1e-5,
                                               accountant=accountant)
  runs = [r if isinstance(r, tuple) and not hasattr(r, "_fields") else (r, 1)
          for r in spent]
  assert k >= 1
  assert epsilon(runs + [(step, k)], accountant) <= target
  assert epsilon(runs + [(step, k + 1)], accountant) > target


def test_pld_allows_more_steps_than_rdp():
  pld = analysis.max_additional_steps_for_events([], STEP, 1.0, 1e-5)
  rdp = analysis.max_additional_steps_for_events([], STEP, 1.0, 1e-5,
                                                 accountant="rdp")
  assert pld > rdp * 1.2


def test_exceeded_and_free_steps():
  assert analysis.max_additional_steps_for_events(
      [(STEP, 10 ** 5)], STEP, 1.0, 1e-5) == -1
  free = LedgerEvent("poisson", 0.01, float("inf"), 60000, 1)
  assert analysis.max_additional_steps_for_events(
      [], free, 1.0, 1e-5, limit=1234) == 1234


def test_rdp_curve_form_still_works():
  orders = analysis.DEFAULT_ORDERS
  step = analysis.compute_rdp(0.01, 1.1, 1, orders)
  k = analysis.max_additional_steps(orders, np.zeros(len(orders)), step, 1.0,
                                    1e-5)
  assert k == analysis.max_additional_steps_for_events(
      [], STEP, 1.0, 1e-5, orders=list(orders))
  assert analysis.max_additional_steps(orders, step * 10 ** 6, step, 1.0,
                                       1e-5) == -1
