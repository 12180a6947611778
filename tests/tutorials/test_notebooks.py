"""The tutorial notebooks are up to date and run top to bottom (quick mode:
TF_DP_QUICK=1), all in one Python process started for them
(notebook_runner.py), each in a fresh namespace."""

import functools
import glob
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import warnings

import pytest

from tests.tutorials import notebook_runner

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "tutorials", "notebooks",
                                          "*.ipynb")))
RUNNER = os.path.join(ROOT, "tests", "tutorials", "notebook_runner.py")


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


def _needs_missing_package(notebook):
  """Why ``notebook`` cannot run here, or None."""
  # KerasHub is a test and tutorial extra of the Keras 3 stack.
  code = notebook_runner.notebook_code(notebook)
  if "import keras_hub" in code and importlib.util.find_spec(
      "keras_hub") is None:
    return "needs keras_hub (requirements/tf221.txt)"
  return None


@functools.lru_cache(maxsize=None)
def _run_notebooks(notebooks):
  """Runs ``notebooks`` top to bottom in one fresh Python process
  (notebook_runner.py: each in a new namespace, TensorFlow started once):
  ``{file name: None or the traceback that stopped it}``."""
  env = dict(os.environ, TF_DP_QUICK="1", PYTHONPATH=ROOT,
             TF_CPP_MIN_LOG_LEVEL="3")
  with tempfile.TemporaryDirectory() as tmp:
    results = os.path.join(tmp, "results.json")
    out = subprocess.run([sys.executable, RUNNER, results, *notebooks],
                         cwd=ROOT, env=env, capture_output=True, text=True,
                         check=False, timeout=600 * len(notebooks))
    assert out.returncode == 0, out.stderr[-3000:]
    with open(results, encoding="utf-8") as f:
      return json.load(f)


def _selected_notebooks(session):
  """The notebooks of the test_notebook_runs_top_to_bottom cases this
  session runs, in order."""
  return tuple(sorted(
      item.callspec.params["notebook"] for item in session.items
      if item.originalname == "test_notebook_runs_top_to_bottom"
      and _needs_missing_package(item.callspec.params["notebook"]) is None))


@pytest.mark.slow
@pytest.mark.parametrize("notebook", NOTEBOOKS,
                         ids=[os.path.basename(n) for n in NOTEBOOKS])
def test_notebook_runs_top_to_bottom(notebook, request):
  missing = _needs_missing_package(notebook)
  if missing:
    pytest.skip(missing)
  error = _run_notebooks(_selected_notebooks(request.session))[
      os.path.basename(notebook)]
  assert error is None, error
