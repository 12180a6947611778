"""Epsilon of a sequence of recorded events, by PLD or RDP accounting.

The ledger functions (``compute_epsilon_from_ledger``) and the budget
planner read a ledger as runs of plain events, ``(event, count)`` with
``event`` having ``sampling``, ``sampling_probability``,
``noise_multiplier`` and ``examples_per_record`` (``ledger.LedgerEvent``),
and account them here, so that both report the same number.

Privacy contract: ``"poisson"`` samples are accounted as the
Poisson-subsampled Gaussian (add/remove one record, sensitivity C);
``"fixed_size"`` (and ``"shuffled"``, by the conventional approximation)
samples as sampling without replacement (replace one record, sensitivity
2C); ``"fixed_order"`` samples as passes, each an unsampled Gaussian
mechanism of sensitivity 2C for the replaced example (``fixed_order``,
replace one record, no amplification). Samples that released nothing (q = 0 or an infinite noise multiplier)
cost nothing; a sample with zero noise makes epsilon infinite. A Poisson
sample whose records are microbatches is refused: Poisson sampling of
examples does not sample microbatches.
"""

import collections
import math
from typing import Any, Counter, Iterable, Optional, Tuple

import numpy as np

from tf_dp.analysis import checks
from tf_dp.analysis import conversion as conversion_lib
from tf_dp.analysis import dp_sgd_privacy as privacy_lib
from tf_dp.analysis import fixed_order
from tf_dp.analysis import pld as pld_lib
from tf_dp.analysis import rdp as rdp_lib
from tf_dp.analysis import rdp_fixed_size
from tf_dp.errors import PrivacyError
from tf_dp.sampling import Sampling

# Above this many distinct (sampling, q, sigma) events both accountants
# merge them into pessimistic classes (``pld.coarsen_events``): a 0.5% grid
# for noise multipliers spread over [0.8, 3].
RDP_MAX_DISTINCT_EVENTS = pld_lib.DEFAULT_MAX_DISTINCT_EVENTS


def gaussian_event_counts(
    runs: Iterable[Tuple[Any, int]]) -> Counter[pld_lib.GaussianEvent]:
  """``Counter`` of ``pld.GaussianEvent`` -> steps (no-ops dropped);
  fixed-order lots are grouped into passes first
  (``fixed_order.pass_runs``)."""
  counts: Counter[pld_lib.GaussianEvent] = collections.Counter()
  for e, count in fixed_order.pass_runs(runs):
    sampling = Sampling.check("sampling", e.sampling).accounted_as
    if sampling is Sampling.POISSON and e.examples_per_record > 1:
      raise PrivacyError(
          "The ledger records Poisson sampling with microbatches as records; "
          "use fixed-size batches (sampling='fixed_size') with microbatches.")
    event = pld_lib.GaussianEvent(sampling, e.sampling_probability,
                                  e.noise_multiplier)
    if count and not event.is_noop:
      counts[event] += count
  return counts


def rdp_of_runs(
    runs: Iterable[Tuple[Any, int]], orders: Optional[checks.FloatArray] = None,
    max_distinct_events: Optional[int] = RDP_MAX_DISTINCT_EVENTS) -> np.ndarray:
  """RDP (per order) of ``(event, count)`` runs."""
  orders = np.asarray(rdp_lib.DEFAULT_ORDERS if orders is None else orders,
                      dtype=float)
  counts = pld_lib.coarsen_events(gaussian_event_counts(runs),
                                  max_distinct_events)
  total = np.zeros(len(orders))
  poisson = []
  for e, n in counts.items():
    q, z = e.sampling_probability, e.noise_multiplier
    if z == 0:
      return np.full(len(orders), np.inf)
    if e.sampling is Sampling.POISSON:
      poisson.append((q, z, n))
    else:
      total += rdp_fixed_size.compute_rdp_fixed_size(q, z, n, orders)
  if poisson:
    total += rdp_lib.compute_heterogeneous_rdp(poisson, orders)
  return total


def epsilon_of_runs(runs: Iterable[Tuple[Any, int]], delta: float,
                    orders: Optional[checks.FloatArray] = None,
                    conversion: Optional[str] = None,
                    accountant: Optional[str] = None) -> Tuple[float, float]:
  """``(epsilon, optimal_order)`` of ``(event, count)`` runs.

  ``accountant`` is ``"pld"``, ``"rdp"`` or None (``"pld"`` unless
  ``orders`` or ``conversion`` is given); the order is ``nan`` for PLD and
  when nothing private was released.
  """
  accountant = privacy_lib.resolve_accountant(
      accountant, orders=orders, conversion=conversion)
  runs = list(runs)
  if accountant == "pld":
    acc = pld_lib.PLDAccountant()
    for event, count in gaussian_event_counts(runs).items():
      acc.compose(event, count)
    return acc.get_epsilon(delta), math.nan
  orders = rdp_lib.DEFAULT_ORDERS if orders is None else orders
  rdp = rdp_of_runs(runs, orders)
  if np.all(np.isinf(rdp)):
    return math.inf, math.nan
  if not np.any(rdp):
    return 0.0, math.nan  # Nothing private was released.
  eps, _, order = conversion_lib.get_privacy_spent(
      orders, rdp, target_delta=delta, conversion=conversion or "tight")
  return eps, order
