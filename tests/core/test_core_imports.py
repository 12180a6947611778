"""The core DP step is framework-neutral: no module of tf_dp.core imports
Keras, tf_keras or one of tf_dp's front ends."""

import ast
import os
import pkgutil
import subprocess
import sys

import tf_dp.core
from tf_dp.core import caller_api
from tf_dp.core import config
from tf_dp.core import lot
from tf_dp.core import lot_engine
from tf_dp.core import provenance
from tf_dp.core import vectorized
from tf_dp.core.provenance import arithmetic
from tf_dp.core.provenance import images
from tf_dp.core.provenance import labels
from tf_dp.core.provenance import layout
from tf_dp.core.provenance import lists
from tf_dp.core.provenance import op_rules
from tf_dp.core.provenance import registry
from tf_dp.core.provenance import reshapes
from tf_dp.core.provenance import shapes
from tf_dp.core.provenance import walker

MODULES = (tf_dp.core, caller_api, config, lot, lot_engine, provenance,
           vectorized)
PROVENANCE = (arithmetic, images, labels, layout, lists, op_rules, registry,
              reshapes, shapes, walker)
FRONT_ENDS = ("keras", "tf_keras", "tf_dp.keras", "tf_dp.estimator")


def _imported_modules(path):
  tree = ast.parse(open(path, encoding="utf-8").read(), path)
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      yield from (a.name for a in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module:
      yield node.module


def test_every_core_module_is_checked():
  present = {m.name for m in pkgutil.iter_modules(tf_dp.core.__path__)}
  assert present == {m.__name__.rsplit(".", 1)[-1] for m in MODULES[1:]}
  present = {m.name for m in pkgutil.iter_modules(provenance.__path__)}
  assert present == {m.__name__.rsplit(".", 1)[-1] for m in PROVENANCE}


def test_no_core_module_imports_a_front_end():
  for module in MODULES + PROVENANCE:
    for name in _imported_modules(module.__file__):
      assert not any(name == f or name.startswith(f + ".")
                     for f in FRONT_ENDS), f"{module.__name__} imports {name}"


def test_importing_the_core_loads_no_front_end():
  code = ("import sys; import tf_dp.core.lot_engine, tf_dp.core.vectorized; "
          "print(sorted(m for m in sys.modules if m.startswith("
          "('tf_dp.keras', 'tf_dp.estimator', 'tf_keras'))))")
  root = os.path.dirname(os.path.dirname(os.path.dirname(config.__file__)))
  out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                       text=True, check=True, cwd=root,
                       env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  assert out.stdout.strip().splitlines()[-1] == "[]"
