#!/usr/bin/env bash
# Builds every Bazel target of tf_dp and runs a fast subset of the tests
# under Bazel, offline (Debian's bazel-bootstrap, Bazel 4.2.3).
#   usage: scripts/bazel_check.sh [venv python] [extra bazel test arguments]
# The python (default .venv-tf221/bin/python; see scripts/setup_env.sh) is
# the interpreter of every py_binary/py_test, and its site-packages provide
# the third-party packages. Bazel's output base is under
# ${TF_DP_BAZEL_ROOT:-~/.cache/bazel} (a few MB). Needs Debian's bazel-bootstrap
# (apt-get install -y bazel-bootstrap); see WORKSPACE and tools/bazel/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
py="${1:-$root/.venv-tf221/bin/python}"
shift || true
# Absolute, but the venv's own python, not the interpreter it links to.
case "$py" in /*) ;; *) py="$root/$py" ;; esac
[ -x "$py" ] || { echo "no python at $py (run scripts/setup_env.sh tf221)" >&2; exit 2; }
command -v bazel >/dev/null || {
  echo "bazel not found: apt-get install -y bazel-bootstrap" >&2; exit 2; }

# Pure-Python tests that take seconds: accounting, ledger schema, lazy import.
fast_tests=(
  //tests:test_import
  //tests/analysis:test_composition
  //tests/analysis:test_ledger
  //tests/analysis:test_ledger_schema
  //tests/analysis:test_rdp
  //tests/analysis:test_search
)
startup=()
[ -z "${TF_DP_BAZEL_ROOT:-}" ] || startup+=(--output_user_root="$TF_DP_BAZEL_ROOT")
flags=(--repo_env=TF_DP_PYTHON="$py")

echo "=== bazel build //... (python: $py)"
bazel "${startup[@]}" build "${flags[@]}" //...
echo "=== bazel test (fast subset)"
bazel "${startup[@]}" test "${flags[@]}" "${fast_tests[@]}" "$@"
