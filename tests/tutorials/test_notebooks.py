"""The tutorial notebooks are up to date and run top to bottom (quick mode)."""

import glob
import importlib.util
import json
import os
import subprocess
import sys
import warnings

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "tutorials", "notebooks",
                                          "*.ipynb")))


def test_notebooks_are_generated_from_the_scripts():
  out = subprocess.run([sys.executable,
                        os.path.join(ROOT, "scripts", "make_notebooks.py"),
                        "--check"], capture_output=True, text=True,
                       check=False)
  assert out.returncode == 0, out.stdout
  assert len(NOTEBOOKS) >= 7


def test_notebooks_are_valid_nbformat():
  nbformat = pytest.importorskip("nbformat")  # The tutorials extra.
  for path in NOTEBOOKS:
    with warnings.catch_warnings():
      # nbformat warns (MissingIDFieldWarning) where it will refuse later.
      warnings.simplefilter("error")
      nbformat.validate(nbformat.read(path, as_version=4))


@pytest.mark.slow
@pytest.mark.parametrize("notebook", NOTEBOOKS,
                         ids=[os.path.basename(n) for n in NOTEBOOKS])
def test_notebook_runs_top_to_bottom(notebook):
  cells = json.load(open(notebook))["cells"]
  code = "\n\n".join("".join(c["source"]) for c in cells
                     if c["cell_type"] == "code")
  # KerasHub is a test and tutorial extra of the Keras 3 stack.
  if "import keras_hub" in code and importlib.util.find_spec(
      "keras_hub") is None:
    pytest.skip("needs keras_hub (requirements/tf221.txt)")
  env = dict(os.environ, TF_DP_QUICK="1", PYTHONPATH=ROOT,
             TF_CPP_MIN_LOG_LEVEL="3")
  out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                       capture_output=True, text=True, check=False,
                       timeout=600)
  assert out.returncode == 0, out.stderr[-3000:]
