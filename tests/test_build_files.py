"""Every module and test file is declared in a Bazel BUILD file."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _declared_srcs(build_path):
  """Executes a BUILD file with stub rules and returns its srcs by kind."""
  srcs = {"py_library": set(), "py_test": set()}

  def rule(kind):
    def f(name, srcs=(), **kwargs):
      del name, kwargs
      declared[kind].update(srcs)
    return f

  declared = srcs
  env = {"load": lambda *a, **k: None, "package": lambda **k: None,
         "exports_files": lambda *a, **k: None,
         "requirement": lambda name: "@pip//" + name,
         "py_library": rule("py_library"), "py_test": rule("py_test")}
  exec(compile(open(build_path).read(), build_path, "exec"), env)  # pylint: disable=exec-used
  return srcs


def test_every_module_and_test_is_declared():
  missing = []
  for pkg in ("tf_dp", "tests"):
    for dirpath, _, filenames in os.walk(os.path.join(ROOT, pkg)):
      if "__pycache__" in dirpath:
        continue
      pys = [f for f in filenames if f.endswith(".py")]
      if not pys:
        continue
      build = os.path.join(dirpath, "BUILD")
      if not os.path.exists(build):
        missing.append(os.path.relpath(build, ROOT))
        continue
      declared = _declared_srcs(build)
      for f in pys:
        kind = "py_test" if f.startswith("test_") else "py_library"
        if f not in declared[kind]:
          missing.append(f"{os.path.relpath(dirpath, ROOT)}/{f} ({kind})")
  assert not missing, "Not declared in BUILD files: " + ", ".join(missing)


def test_build_files_are_up_to_date():
  out = subprocess.run(
      [sys.executable, os.path.join(ROOT, "scripts", "update_build_files.py"),
       "--check"], capture_output=True, text=True, check=False)
  assert out.returncode == 0, out.stdout + out.stderr
