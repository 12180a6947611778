"""Runs tutorial notebooks top to bottom, one after the other, in this one
process (tests/tutorials/test_notebooks.py starts it): TensorFlow's start-up
is most of a quick notebook's time, and is paid once.

Usage: notebook_runner.py RESULTS_JSON NOTEBOOK...

Each notebook's code cells run as one program, as a fresh kernel would run
them: in a new ``__main__`` module, from the directory this process
started in, with ``sys.argv`` of ``python -c``. Between notebooks the working directory, ``sys.path`` and
``os.environ`` are put back, the modules a notebook imported from
``tutorials/`` are forgotten (the next one imports them afresh), and each
Keras flavour's global state is cleared (``clear_session``: layer names,
the graph). RESULTS_JSON receives ``{notebook file name: None, or the
traceback of the exception that stopped it}``.
"""

import json
import linecache
import os
import sys
import traceback
import types

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
TUTORIALS = os.path.join(ROOT, "tutorials") + os.sep


def notebook_code(path):
  """The notebook's code cells, joined in order."""
  with open(path, encoding="utf-8") as f:
    cells = json.load(f)["cells"]
  return "\n\n".join("".join(c["source"]) for c in cells
                     if c["cell_type"] == "code")


def run_notebook(path):
  """None, or the traceback of the exception that stopped the notebook.

  Its code runs in a new ``__main__`` module, and its source is in
  ``linecache`` under its own name, as a kernel keeps a cell's: so
  ``inspect`` (AutoGraph converting a ``tf.function``) reads the
  notebook's lines, and objects it defines live in ``__main__``."""
  source = notebook_code(path)
  filename = f"<notebook {os.path.basename(path)}>"
  linecache.cache[filename] = (len(source), None, source.splitlines(True),
                               filename)
  main_module = types.ModuleType("__main__")
  runner_main = sys.modules["__main__"]
  sys.modules["__main__"] = main_module
  sys.argv = ["-c"]
  try:
    exec(compile(source, filename, "exec"), main_module.__dict__)  # pylint: disable=exec-used
  except (Exception, SystemExit):  # pylint: disable=broad-except
    return traceback.format_exc()[-3000:]
  finally:
    sys.modules["__main__"] = runner_main
  return None


def _forget_tutorial_modules():
  for name, module in list(sys.modules.items()):
    path = getattr(module, "__file__", None) or ""
    if os.path.abspath(path).startswith(TUTORIALS):
      del sys.modules[name]


def _clear_keras_state():
  for name in ("keras", "tf_keras"):
    module = sys.modules.get(name)
    if module is not None:
      module.backend.clear_session()
  pyplot = sys.modules.get("matplotlib.pyplot")
  if pyplot is not None:
    pyplot.close("all")


def main(results_path, notebooks):
  cwd, path, environ = os.getcwd(), list(sys.path), dict(os.environ)
  argv = sys.argv
  results = {}
  for notebook in notebooks:
    print(f"=== {os.path.basename(notebook)}", file=sys.stderr, flush=True)
    results[os.path.basename(notebook)] = run_notebook(notebook)
    os.chdir(cwd)
    sys.argv = argv
    sys.path[:] = path
    os.environ.clear()
    os.environ.update(environ)
    _forget_tutorial_modules()
    _clear_keras_state()
  with open(results_path, "w", encoding="utf-8") as f:
    json.dump(results, f)


if __name__ == "__main__":
  main(sys.argv[1], sys.argv[2:])
