"""Test-run settings shared by every test file.

``TF_DP_TEST_TIMES=<file>`` appends one line per finished test,
``<seconds>\\t<node id>``, as each test ends (with pytest-xdist, from the
controlling process, which receives every worker's reports), so that the
times of a run stopped early are still known; ``scripts/test_times.py``
sums them per file.

``--stack-share=tf221|tf215`` (``scripts/test.sh`` passes it) runs this
stack's share of the Keras 2 cases, which both stacks run through the same
adapter (tf-keras 2.21 on TF 2.21, tf.keras 2.15 on TF 2.15), so that each
runs once per test run instead of twice. A Keras 2 case (``keras2`` among
its parameter ids) that is neither marked slow (TF 2.21 runs those) nor
guarded by a ``skipif`` belongs to one stack by a stable hash of its node
id. Every other case (Keras 3, accounting, queries, the Estimator,
``compat``, ...) runs on each stack that has what it needs. Without the
option every case runs.
"""

import os
import zlib

# pytest-xdist replays each worker's reports in the controlling process,
# which alone writes them.
_TIMES = (None if os.environ.get("PYTEST_XDIST_WORKER")
          else os.environ.get("TF_DP_TEST_TIMES"))


def pytest_runtest_logreport(report):
  if _TIMES and (report.when == "call" or (
      report.when == "setup" and report.skipped)):
    with open(_TIMES, "a", encoding="utf-8") as out:
      out.write(f"{report.duration:.2f}\t{report.nodeid}\n")


STACKS = ("tf221", "tf215")


def pytest_addoption(parser):
  parser.addoption(
      "--stack-share", choices=STACKS, default=None,
      help="run only this stack's share of the Keras 2 cases (see "
           "tests/conftest.py); default: every case")


def _is_shared(item):
  if item.get_closest_marker("slow") or item.get_closest_marker("skipif"):
    return False
  callspec = getattr(item, "callspec", None)
  return callspec is not None and "keras2" in callspec.id.split("-")


def _owner(item):
  return STACKS[zlib.crc32(item.nodeid.encode("utf-8")) % len(STACKS)]


def pytest_collection_modifyitems(config, items):
  stack = config.getoption("--stack-share")
  if stack is None:
    return
  kept, dropped = [], []
  for item in items:
    (dropped if _is_shared(item) and _owner(item) != stack else kept).append(
        item)
  if dropped:
    config.hook.pytest_deselected(items=dropped)
    items[:] = kept
