"""Test-run settings shared by every test file.

``TF_DP_TEST_TIMES=<file>`` appends one line per finished test,
``<seconds>\\t<node id>``, as each test ends (with pytest-xdist, from the
controlling process, which receives every worker's reports), so that the
times of a run stopped early are still known; ``scripts/test_times.py``
sums them per file.
"""

import os

# pytest-xdist replays each worker's reports in the controlling process,
# which alone writes them.
_TIMES = (None if os.environ.get("PYTEST_XDIST_WORKER")
          else os.environ.get("TF_DP_TEST_TIMES"))


def pytest_runtest_logreport(report):
  if _TIMES and (report.when == "call" or (
      report.when == "setup" and report.skipped)):
    with open(_TIMES, "a", encoding="utf-8") as out:
      out.write(f"{report.duration:.2f}\t{report.nodeid}\n")
