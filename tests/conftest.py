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
id. So does every case of a file marked ``stack_independent`` (the
accountants' numerical tests: pure Python, NumPy and SciPy, with no
TensorFlow; each stack's NumPy and SciPy still run half of them). Cases
marked ``share_group(name)`` hash ``name`` instead of their node id and so
run on the same stack (cases that share one expensive subprocess). Every
other case (Keras 3, queries, the Estimator, ``compat``, ...) runs on each
stack that has what it needs. Without the option every case runs.
"""

import gc
import os
import random
import sys
import zlib

import numpy as np
import pytest

# The files that take longest (scripts/test_times.py over full runs of both
# stacks), longest first. pytest-xdist's --dist loadfile hands files to the
# workers in collection order, so these are collected first and the run
# ends on short files instead of one worker running a long file while the
# other idles. Order only: which tests run, and how, is unchanged.
LONGEST_FILES = (
    "tests/distribute/test_mirrored_strategy.py",
    "tests/keras/test_dtype_policies.py",
    "tests/keras/test_dp_training.py",
    "tests/tutorials/test_notebooks.py",
    "tests/compat/test_tf_privacy_suite.py",
    "tests/keras/test_save_load.py",
    "tests/privacy/test_neighbours_sampled.py",
    "tests/privacy/test_neighbours.py",
    "tests/keras/fast/test_clipped_sum.py",
    "tests/keras/fast/test_conv_rules.py",
    "tests/keras/fast/test_einsum_rule.py",
    "tests/estimator/test_dp_optimizer_v1.py",
    "tests/privacy/test_gate_fuzzer.py",
    "tests/keras/test_callbacks.py",
    "tests/keras/test_fit_sampling.py",
)

# pytest-xdist replays each worker's reports in the controlling process,
# which alone writes them.
_TIMES = (None if os.environ.get("PYTEST_XDIST_WORKER")
          else os.environ.get("TF_DP_TEST_TIMES"))


# Keras 2's backends (tf_keras, and keras 2.15's), whose thread-local
# ``_SEED_GENERATOR.generator`` ``set_random_seed`` replaces.
_KERAS2_BACKENDS = ("tf_keras.src.backend", "keras.src.backend")
# Keras 3's global state: the seed ``set_random_seed`` records and the
# global SeedGenerator it resets.
_KERAS3_GLOBALS = ("global_random_seed", "global_seed_generator")


def _global_random_state():
  """Every global random state a test can set: Python's and NumPy's
  generators, TensorFlow's global seed, Keras's seed generators."""
  state = {"random": random.getstate(), "numpy": np.random.get_state()}
  if "tensorflow" in sys.modules:
    from tensorflow.python.eager import context  # pylint: disable=g-import-not-at-top
    state["tensorflow"] = context.global_seed()
  for name in _KERAS2_BACKENDS:
    local = getattr(sys.modules.get(name), "_SEED_GENERATOR", None)
    if local is not None:
      state[name] = getattr(local, "generator", None)
  global_state = sys.modules.get("keras.src.backend.common.global_state")
  if global_state is not None:
    state["keras"] = [global_state.get_global_attribute(a)
                      for a in _KERAS3_GLOBALS]
  return state


@pytest.fixture(autouse=True)
def _restore_global_random_state():
  """Puts back, after each test, the global random state it changed
  (``tf.random.set_seed``, ``keras.utils.set_random_seed``,
  ``np.random.seed``): otherwise a seed set by one file holds for every
  file that runs after it in the same process, and a test's draws depend
  on which files pytest-xdist gave its worker before."""
  before = _global_random_state()
  yield
  after = _global_random_state()
  random.setstate(before["random"])
  np.random.set_state(before["numpy"])
  if "tensorflow" in after and after["tensorflow"] != before.get(
      "tensorflow"):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    tf.random.set_seed(before.get("tensorflow"))
  for name in _KERAS2_BACKENDS:
    if name in after and after[name] is not before.get(name):
      sys.modules[name]._SEED_GENERATOR.generator = before.get(name)  # pylint: disable=protected-access
  if "keras" in after and after["keras"] != before.get("keras", [None] * 2):
    global_state = sys.modules["keras.src.backend.common.global_state"]
    for attribute, value in zip(_KERAS3_GLOBALS,
                                before.get("keras", [None] * 2)):
      global_state.set_global_attribute(attribute, value)


def pytest_sessionfinish(session):
  """In a pytest-xdist worker: collects the garbage and freezes the rest
  (``gc.freeze``) before the worker reports that it has finished.

  Once it has, the controller closes the worker's execnet gateway, and
  execnet sends the worker a SIGINT if it is still running 5 seconds later.
  pytest's ``pytest_unconfigure`` then runs ``gc.collect()`` over the whole
  heap of the worker's TensorFlow graphs and models: 7 s for 620 000
  objects after three test files on a loaded 2-core machine. The SIGINT's
  KeyboardInterrupt was raised inside the Python code the collection was
  running, hypothesis's gc callback, and printed as a
  PytestUnraisableExceptionWarning. Collected here, before the report, the
  heap left is frozen and the later collection has nothing to walk.
  """
  del session
  if os.environ.get("PYTEST_XDIST_WORKER"):
    gc.collect()
    gc.freeze()


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
  if item.get_closest_marker("stack_independent"):
    return True
  callspec = getattr(item, "callspec", None)
  return callspec is not None and "keras2" in callspec.id.split("-")


def _owner(item):
  group = item.get_closest_marker("share_group")
  key = group.args[0] if group else item.nodeid
  return STACKS[zlib.crc32(key.encode("utf-8")) % len(STACKS)]


def _file_rank(item):
  path = item.nodeid.split("::")[0]
  return (LONGEST_FILES.index(path) if path in LONGEST_FILES
          else len(LONGEST_FILES))


def pytest_collection_modifyitems(config, items):
  items.sort(key=_file_rank)  # A stable sort: files keep their own order.
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
