#!/usr/bin/env bash
# Sets up both supported stacks and runs the whole test suite on each:
#   tf221: TensorFlow 2.21, Keras 3 and tf-keras 2.21 (default)
#   tf215: TensorFlow 2.15, tf.keras 2.15 and tf.estimator
# TF 2.15 runs the tests not marked slow (its own code paths, the Keras 2.15
# adapter and the Estimator, have fast tests; the slow end-to-end runs train
# the same tf_dp code as on TF 2.21, whose tf-keras runs Keras 2's path);
# TF_DP_SLOW_ON_ALL_STACKS=1 runs them there too.
# Extra arguments go to pytest (e.g. -m "not slow" tests/core). Tests marked long
# (the corpus's slowest models) run only with TF_DP_LONG=1. The tests run in
# TF_DP_TEST_WORKERS pytest-xdist processes (default 2, one per core of the
# reference machine; 0 runs them in this process), a test file per worker.
# Each stack runs its share of the Keras 2 cases, which both stacks run
# through the same adapter, and of the stack-independent accounting tests
# (--stack-share, tests/conftest.py): each such case runs once, on one of
# them; TF_DP_FULL_MATRIX=1 runs every case on every stack. Set
# TF_DP_STACKS="tf221" to test one stack only (it then
# runs its share only, unless TF_DP_FULL_MATRIX=1). After each stack's tests
# it prints the files that took longest (TF_DP_TEST_TIMES, tests/conftest.py).
# Each stack also type-checks all of tf_dp with mypy (mypy.ini).
# Then, if Bazel is installed (Debian's bazel-bootstrap), builds every BUILD
# target and runs a fast subset under Bazel (scripts/bazel_check.sh);
# TF_DP_BAZEL=require fails when Bazel is missing, TF_DP_BAZEL=skip skips it.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
# The user's paths (tests/core, tests/x.py::test_y) select the tests; with
# none, the whole of tests/ runs. An own -q/-v replaces the default -q.
targets=(tests)
quiet=(-q)
for arg in "$@"; do
  case "$arg" in
    -q|-qq|-v|-vv|--quiet|--verbose) quiet=() ;;
  esac
  if [ -e "${arg%%::*}" ]; then targets=(); fi
done
export TF_CPP_MIN_LOG_LEVEL=2 PYTHONHASHSEED=0
status=0
bazel_py=""
read -r -a stacks <<< "${TF_DP_STACKS:-tf221 tf215}"
# The stacks after the first are set up in the background while the first
# one's tests run (an installation is mostly waiting on the network); the
# loop below waits for each and re-runs its setup, a no-op once installed.
declare -A setup_pid setup_log
for stack in "${stacks[@]:1}"; do
  setup_log[$stack]="$(mktemp)"
  scripts/setup_env.sh "$stack" > "${setup_log[$stack]}" 2>&1 &
  setup_pid[$stack]=$!
done
for stack in "${stacks[@]}"; do
  echo "=== stack $stack: setting up"
  if [ -n "${setup_pid[$stack]:-}" ]; then
    wait "${setup_pid[$stack]}" || echo "background setup of $stack failed; retrying"
    grep -v "^WARNING: Location" "${setup_log[$stack]}" | head -n 40
    rm -f "${setup_log[$stack]}"
  fi
  py="$(scripts/setup_env.sh "$stack" | tail -n 1)" || { echo "setup of $stack failed"; status=1; continue; }
  bazel_py="${bazel_py:-$py}"
  echo "=== stack $stack: $("$py" -c 'import tensorflow as tf, numpy; print("tensorflow", tf.__version__, "numpy", numpy.__version__)' 2>/dev/null)"
  workers=(-n "${TF_DP_TEST_WORKERS:-2}" --dist loadfile)
  [ "${TF_DP_TEST_WORKERS:-2}" = 0 ] && workers=()
  marks=(-m "not long")
  [ -n "${TF_DP_LONG:-}" ] && marks=()
  if [ "$stack" = tf215 ] && [ -z "${TF_DP_SLOW_ON_ALL_STACKS:-}" ]; then
    marks=(-m "not slow and not long")
    [ -n "${TF_DP_LONG:-}" ] && marks=(-m "not slow")
  fi
  share=(--stack-share="$stack")
  [ -n "${TF_DP_FULL_MATRIX:-}" ] && share=()
  times="$(mktemp)"
  TF_DP_TEST_TIMES="$times" "$py" -m pytest -p no:cacheprovider "${quiet[@]}" "${workers[@]}" "${marks[@]}" "${share[@]}" "$@" "${targets[@]}"
  rc=$?
  echo "=== stack $stack: test time per file (seconds, summed over workers)"
  "$py" scripts/test_times.py "$times" 12 | sed -n 1,13p
  rm -f "$times"
  if [ $rc -eq 5 ]; then
    echo "=== stack $stack: pytest collected no tests (exit 5): treated as a failure"
    rc=1
  fi
  echo "=== stack $stack: pytest exit code $rc"
  [ $rc -eq 0 ] || status=1
  echo "=== stack $stack: mypy (mypy.ini: all of tf_dp)"
  if "$py" -m mypy; then
    echo "=== stack $stack: mypy passed"
  else
    echo "=== stack $stack: mypy FAILED"; status=1
  fi
done
bazel_mode="${TF_DP_BAZEL:-auto}"
if [ "$bazel_mode" != skip ]; then
  if [ -z "$bazel_py" ]; then
    echo "=== bazel: no stack was set up"; status=1
  elif command -v bazel >/dev/null; then
    echo "=== bazel: build //... and the fast test subset"
    if bash scripts/bazel_check.sh "$bazel_py"; then
      echo "=== bazel: passed"
    else
      echo "=== bazel: FAILED"; status=1
    fi
  elif [ "$bazel_mode" = require ]; then
    echo "=== bazel: not installed (apt-get install -y bazel-bootstrap)"; status=1
  else
    echo "=== bazel: not installed, skipped (apt-get install -y bazel-bootstrap)"
  fi
fi
exit $status
