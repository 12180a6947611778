#!/usr/bin/env bash
# Sets up both supported stacks and runs the whole test suite on each:
#   tf221: TensorFlow 2.21, Keras 3 and tf-keras 2.21 (default)
#   tf215: TensorFlow 2.15, tf.keras 2.15 and tf.estimator
# Extra arguments go to pytest (e.g. -m "not slow").
# Set TF_DP_STACKS="tf221" to test one stack only.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
export TF_CPP_MIN_LOG_LEVEL=2 PYTHONHASHSEED=0
status=0
for stack in ${TF_DP_STACKS:-tf221 tf215}; do
  echo "=== stack $stack: setting up"
  py="$(scripts/setup_env.sh "$stack" | tail -n 1)" || { echo "setup of $stack failed"; status=1; continue; }
  echo "=== stack $stack: $("$py" -c 'import tensorflow as tf, numpy; print("tensorflow", tf.__version__, "numpy", numpy.__version__)' 2>/dev/null)"
  "$py" -m pytest -q -p no:cacheprovider "$@" tests
  rc=$?
  if [ $rc -eq 5 ]; then
    echo "=== stack $stack: pytest collected no tests (exit 5): treated as a failure"
    rc=1
  fi
  echo "=== stack $stack: pytest exit code $rc"
  [ $rc -eq 0 ] || status=1
done
exit $status
