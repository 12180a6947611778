"""Time (and tightness) of epsilon from a ledger, PLD and RDP accountants.

For each workload a version-2 ledger (runs of identical samples) is built
and ``compute_epsilon_from_ledger(ledger, 1e-5, accountant=...)`` is timed:
the path a user (or the PrivacyBudget callback) takes. Targets:

  10^6 identical steps                     < 1 s   (PLD and RDP)
  10^4 steps with 100 distinct (q, sigma)  < 2 s   (PLD and RDP)
  10^4 all-distinct events                 < 10 s PLD, < 1 s RDP

Prints the median wall time and the process (CPU) time of one call, the
epsilon of each accountant, the 1-minute load average (this machine's cores
are shared), and, if dp_accounting is installed, its PLD accountant's time
and epsilon on the homogeneous workloads for comparison.

  python benchmarks/accounting_speed.py
"""

import os
import statistics
import time

import numpy as np

from tf_dp.analysis import compute_epsilon_from_ledger

DELTA = 1e-5
Q = 256 / 60000


def _ledger(runs):
  """A version-2 ledger export of ``(q, sigma, count)`` Poisson runs."""
  return {"format": "tf_dp.privacy_ledger/2", "dropped_samples": 0,
          "runs": [{"population_size": 60000, "sampling_probability": q,
                    "sampling": "poisson", "examples_per_record": 1,
                    "sum_queries": [{"l2_norm_clip": 1.0,
                                     "noise_stddev": sigma}],
                    "count": count} for q, sigma, count in runs]}


def _timed(fn, repeats):
  walls, cpus, value = [], [], None
  for _ in range(repeats):
    wall, cpu = time.perf_counter(), time.process_time()
    value = fn()
    walls.append(time.perf_counter() - wall)
    cpus.append(time.process_time() - cpu)
  return statistics.median(walls), statistics.median(cpus), value


def _dp_accounting_epsilon(runs):
  import dp_accounting  # pylint: disable=g-import-not-at-top
  acc = dp_accounting.pld.PLDAccountant()
  for q, sigma, count in runs:
    acc.compose(dp_accounting.PoissonSampledDpEvent(
        q, dp_accounting.GaussianDpEvent(sigma)), count)
  return acc.get_epsilon(DELTA)


def workloads():
  rng = np.random.default_rng(0)
  # Abadi et al.'s time-dependent sigma: 100 distinct (q, sigma) pairs.
  schedule = [(0.004 * (1 + i % 4), 0.8 + 0.01 * (i // 4 % 25), 100)
              for i in range(100)]
  distinct = [(0.01, float(s), 1) for s in rng.uniform(0.8, 3.0, 10 ** 4)]
  return [
      ("main.sh: 702 steps, sigma 1.3", [(Q, 1.3, 702)], None, None, 3),
      ("MNIST 60 ep.: 14063 steps, s 1.1", [(Q, 1.1, 14063)], None, None, 3),
      ("MNIST 60 ep.: 14063 steps, s 2.178", [(Q, 2.178, 14063)], None, None,
       3),
      ("1e+06 identical steps", [(Q, 1.1, 10 ** 6)], 1.0, 1.0, 3),
      ("1e+04 steps, 100 distinct events", schedule, 2.0, 2.0, 3),
      ("1e+04 all-distinct events", distinct, 10.0, 1.0, 1),
  ]


def main():
  try:
    import dp_accounting  # pylint: disable=g-import-not-at-top,unused-import
    have_dp_accounting = True
  except ImportError:
    have_dp_accounting = False
  print(f"# load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
  print(f"{'workload':36s} {'acct':>5s} {'epsilon':>9s} {'wall':>9s} "
        f"{'cpu':>9s} {'target':>7s}  met")
  for name, runs, pld_target, rdp_target, repeats in workloads():
    ledger = _ledger(runs)
    for accountant, target in (("pld", pld_target), ("rdp", rdp_target)):
      wall, cpu, eps = _timed(
          lambda a=accountant: compute_epsilon_from_ledger(
              ledger, DELTA, accountant=a)[0], repeats)
      tgt = f"{target:6.1f}s" if target else f"{'-':>7s}"
      met = "-" if target is None else ("yes" if wall < target else "NO")
      print(f"{name:36s} {accountant:>5s} {eps:9.4f} {wall:8.3f}s "
            f"{cpu:8.3f}s {tgt}  {met}")
    if have_dp_accounting and len(runs) == 1:
      wall, cpu, eps = _timed(lambda r=runs: _dp_accounting_epsilon(r), 1)
      print(f"{name:36s} {'dp_a':>5s} {eps:9.4f} {wall:8.3f}s {cpu:8.3f}s "
            f"{'-':>7s}  -")


if __name__ == "__main__":
  main()
