"""The core DP step is framework-neutral: no module of tf_dp.core imports
Keras, tf_keras or tf_dp's Keras front end."""

import ast
import os
import subprocess
import sys

import tf_dp

CORE = os.path.join(os.path.dirname(tf_dp.__file__), "core")
FRONT_ENDS = ("keras", "tf_keras", "tf_dp.keras", "tf_dp.estimator")


def _imported_modules(path):
  tree = ast.parse(open(path, encoding="utf-8").read(), path)
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      yield from (a.name for a in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module:
      yield node.module


def test_no_core_module_imports_a_front_end():
  modules = [f for f in os.listdir(CORE) if f.endswith(".py")]
  assert "lot_engine.py" in modules
  for name in modules:
    for module in _imported_modules(os.path.join(CORE, name)):
      assert not any(module == f or module.startswith(f + ".")
                     for f in FRONT_ENDS), f"{name} imports {module}"


def test_importing_the_core_loads_no_front_end():
  code = ("import sys; import tf_dp.core.lot_engine, tf_dp.core.vectorized; "
          "print(sorted(m for m in sys.modules if m.startswith("
          "('tf_dp.keras', 'tf_dp.estimator', 'tf_keras'))))")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                       text=True, check=True,
                       cwd=os.path.dirname(os.path.dirname(CORE)),
                       env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  assert out.stdout.strip().splitlines()[-1] == "[]"
