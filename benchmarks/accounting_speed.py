"""Time to compute epsilon from RDP for long and heterogeneous runs.

Prints the median wall time of ``compute_rdp`` + ``get_privacy_spent`` (the
default order list, tight conversion) for 10^3, 10^5 and 10^6 homogeneous
steps, and of ``compute_heterogeneous_rdp`` for 10^4 events, beside the
targets of the accounting issue (10^6 steps < 10 ms; 10^4 heterogeneous
events < 1 s).

  python benchmarks/accounting_speed.py
"""

import statistics
import time

import numpy as np

from tf_dp.analysis import DEFAULT_ORDERS
from tf_dp.analysis import compute_heterogeneous_rdp
from tf_dp.analysis import compute_rdp
from tf_dp.analysis import get_privacy_spent


def _median_seconds(fn, repeats):
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def _eps_homogeneous(steps):
  rdp = compute_rdp(256 / 60000, 1.1, steps, DEFAULT_ORDERS)
  return get_privacy_spent(DEFAULT_ORDERS, rdp, target_delta=1e-5)[0]


def _eps_heterogeneous(events):
  rdp = compute_heterogeneous_rdp(events, DEFAULT_ORDERS)
  return get_privacy_spent(DEFAULT_ORDERS, rdp, target_delta=1e-5)[0]


def main():
  rng = np.random.default_rng(0)
  rows = []
  for steps in (10 ** 3, 10 ** 5, 10 ** 6):
    t = _median_seconds(lambda s=steps: _eps_homogeneous(s), 20)
    rows.append((f"{steps:.0e} homogeneous steps", t, 0.010 if steps == 10 ** 6
                 else None))
  # A realistic heterogeneous ledger: a noise schedule with 100 distinct
  # (q, sigma) pairs over 10^4 steps (Abadi et al.'s time-dependent sigma).
  sched = [(0.004 * (1 + i % 4), 0.8 + 0.01 * (i // 4 % 25), 100)
           for i in range(100)]
  t = _median_seconds(lambda: _eps_heterogeneous(sched), 5)
  rows.append(("1e+04 steps, 100 distinct events", t, 1.0))
  # Worst case: every one of 10^4 events has its own noise multiplier.
  distinct = [(0.01, float(s), 1) for s in rng.uniform(0.8, 3.0, 10 ** 4)]
  t = _median_seconds(lambda: _eps_heterogeneous(distinct), 3)
  rows.append(("1e+04 all-distinct events", t, 1.0))
  print(f"{'workload':38s} {'median':>10s} {'target':>10s}  met")
  for name, seconds, target in rows:
    tgt = f"{target * 1e3:8.0f}ms" if target else f"{'-':>10s}"
    met = "-" if target is None else ("yes" if seconds < target else "NO")
    print(f"{name:38s} {seconds * 1e3:8.2f}ms {tgt}  {met}")


if __name__ == "__main__":
  main()
