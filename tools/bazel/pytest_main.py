"""Entry point of a tf_dp py_test under Bazel: runs one test file with pytest.

Usage (tools/bazel/py_rules.bzl passes the file): <runner> path/test_x.py
[pytest args]. Then fails if a first-party module was imported from outside
the test's runfiles (e.g. through the venv's editable install of tf_dp):
that module's target is missing from the test's deps.
"""

import os
import sys

FIRST_PARTY = ("tf_dp", "tests", "benchmarks", "tutorials")


def _outside_runfiles(runfiles):
  outside = []
  for name, module in sorted(sys.modules.items()):
    path = getattr(module, "__file__", None)
    if name.split(".")[0] in FIRST_PARTY and path:
      if not os.path.abspath(path).startswith(runfiles + os.sep):
        outside.append(f"{name} ({path})")
  return outside


def main(argv):
  tmp = os.environ.get("TEST_TMPDIR")
  if tmp:  # The runfiles tree is read-only.
    os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY",
                          os.path.join(tmp, ".hypothesis"))
  import pytest  # pylint: disable=import-outside-toplevel
  args = [argv[1], "-q", "-p", "no:cacheprovider", "-c", "pytest.ini",
          "--rootdir", "."] + argv[2:]
  if os.environ.get("XML_OUTPUT_FILE"):
    args.append("--junitxml=" + os.environ["XML_OUTPUT_FILE"])
  if os.environ.get("TESTBRIDGE_TEST_ONLY"):  # bazel test --test_filter=
    args += ["-k", os.environ["TESTBRIDGE_TEST_ONLY"]]
  status = int(pytest.main(args))
  runfiles = os.path.abspath(os.getcwd())
  outside = _outside_runfiles(runfiles)
  if outside:
    print("Imported from outside the runfiles " + runfiles + " (add the "
          "targets to the test's deps):\n  " + "\n  ".join(outside))
    status = status or 1
  return status


if __name__ == "__main__":
  sys.exit(main(sys.argv))
