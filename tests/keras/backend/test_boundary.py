"""Only ``tf_dp/keras/backend/`` knows Keras flavours and Keras private APIs.

A static check of every module under ``tf_dp/``: outside the backend, no
module imports a Keras package (``keras``, ``tf_keras``,
``tensorflow.keras``), compares a flavour string (``"keras3"``,
``"keras2"``), or reads, writes or overrides a Keras private attribute of
the list below. The same scan must find those uses inside the backend, so
the list names attributes tf_dp really uses and the check cannot pass
because it looks at nothing.
"""

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
PACKAGE = os.path.join(ROOT, "tf_dp")
BACKEND = os.path.join(PACKAGE, "keras", "backend")

# Keras private attributes and hooks that tf_dp uses (each one inside the
# backend; a new one belongs to this list and to an adapter).
PRIVATE_ATTRIBUTES = frozenset({
    "_flatten_layers",  # layers: recursive listing, direct sublayers
    "_get_noise_shape",  # Dropout's noise shape
    "_compile_loss", "compiled_loss", "_flat_losses", "_metrics",
    "_conform_to_outputs", "_losses", "_loss_weights",  # loss containers
    "_keras_mask",  # an output's mask
    "_losses_override", "_loss_tracker",  # the reported loss
    "_variables", "_iterations", "_create_iteration_variable",
    "_create_all_weights", "_name",  # optimizers
    "_implements_train_batch_hooks", "_implements_test_batch_hooks",
    "_implements_predict_batch_hooks",  # Keras 2's CallbackList
})
FLAVOR_STRINGS = frozenset({"keras3", "keras2"})
KERAS_PACKAGES = frozenset({"keras", "tf_keras"})

# ``tf.keras`` is TensorFlow's own choice of Keras, not a flavour choice;
# where tf_dp means exactly that, it is allowed, with the reason.
TF_KERAS_ALLOWED = {
    "tf_dp/data/datasets.py": "downloads MNIST with tf.keras.datasets",
    "tf_dp/compat/tensorflow_privacy/privacy/optimizers/"
    "dp_optimizer_keras.py": "TF Privacy's optimizers wrap tf.keras's",
    "tf_dp/compat/tensorflow_privacy/privacy/keras_models/"
    "dp_keras_model.py": "TF Privacy's DPSequential/DPModel are tf.keras "
                         "models",
}


def _is_keras_module_name(name):
  top = name.split(".")[0]
  return top in KERAS_PACKAGES or name == "tensorflow.keras" or (
      name.startswith(("tensorflow.keras.", "tensorflow.python.keras")))


def _flavor_strings(node):
  """The flavour strings ``node`` is (or holds, for a tuple/list/set)."""
  items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [
      node]
  return [i.value for i in items
          if isinstance(i, ast.Constant) and i.value in FLAVOR_STRINGS]


def findings(source, path="<source>"):
  """``[(line, kind, detail)]``: every flavour or private-API use in
  ``source``. Kinds: ``"import"``, ``"flavor"``, ``"private"``,
  ``"tf.keras"``."""
  out = []
  for node in ast.walk(ast.parse(source, path)):
    line = getattr(node, "lineno", 0)
    if isinstance(node, ast.Import):
      out += [(line, "import", a.name) for a in node.names
              if _is_keras_module_name(a.name)]
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
      if _is_keras_module_name(node.module):
        out.append((line, "import", node.module))
      elif node.module == "tensorflow":
        out += [(line, "import", "tensorflow." + a.name) for a in node.names
                if a.name == "keras"]
    elif isinstance(node, ast.Call) and node.args and isinstance(
        node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
      func = node.func
      name = func.attr if isinstance(func, ast.Attribute) else getattr(
          func, "id", "")
      if name in ("import_module", "__import__") and _is_keras_module_name(
          node.args[0].value):
        out.append((line, "import", node.args[0].value))
    elif isinstance(node, ast.Compare):
      for operand in [node.left] + node.comparators:
        out += [(line, "flavor", s) for s in _flavor_strings(operand)]
    elif isinstance(node, ast.Attribute):
      if node.attr in PRIVATE_ATTRIBUTES:
        out.append((line, "private", node.attr))
      elif node.attr == "keras" and isinstance(node.value, ast.Name) and (
          node.value.id == "tf"):
        out.append((line, "tf.keras", "tf.keras"))
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      if node.name in PRIVATE_ATTRIBUTES:  # Overrides a Keras hook.
        out.append((line, "private", node.name))
    elif isinstance(node, ast.Constant) and node.value in PRIVATE_ATTRIBUTES:
      out.append((line, "private", node.value))  # getattr(x, "_losses")
  return out


def _modules(directory):
  for dirpath, dirnames, filenames in os.walk(directory):
    dirnames[:] = [d for d in dirnames if d != "__pycache__"]
    for name in sorted(filenames):
      if name.endswith(".py"):
        yield os.path.join(dirpath, name)


def _scan(paths):
  out = {}
  for path in paths:
    rel = os.path.relpath(path, ROOT).replace(os.sep, "/")
    with open(path, encoding="utf-8") as f:
      found = findings(f.read(), path)
    if found:
      out[rel] = found
  return out


def _outside_backend():
  return [p for p in _modules(PACKAGE)
          if not p.startswith(BACKEND + os.sep)]


@pytest.mark.parametrize("source,expected", [
    ("import keras", [(1, "import", "keras")]),
    ("import tf_keras as k", [(1, "import", "tf_keras")]),
    ("from keras import layers", [(1, "import", "keras")]),
    ("from tensorflow import keras", [(1, "import", "tensorflow.keras")]),
    ("import importlib\nimportlib.import_module('tf_keras')",
     [(2, "import", "tf_keras")]),
    ("if flavor == 'keras3': pass", [(1, "flavor", "keras3")]),
    ("x = 'keras2' != f", [(1, "flavor", "keras2")]),
    ("ok = flavor in ('keras3', 'other')", [(1, "flavor", "keras3")]),
    ("model._flatten_layers()", [(1, "private", "_flatten_layers")]),
    ("m._loss_tracker.update_state(1)", [(1, "private", "_loss_tracker")]),
    ("getattr(layer, '_losses', [])", [(1, "private", "_losses")]),
    ("class C:\n  def _implements_test_batch_hooks(self): pass",
     [(2, "private", "_implements_test_batch_hooks")]),
    ("opt = tf.keras.optimizers.SGD()", [(1, "tf.keras", "tf.keras")]),
    # Not uses: other private names, flavour names passed as values, words
    # in docstrings, tf_dp's own attributes on Keras objects.
    ("for_flavor('keras2')\n'''Reads _losses and keras3.'''\n"
     "model._tf_dp_flavor = 'keras3'\nself._lots = 1", []),
])
def test_findings_recognise_each_kind_of_use(source, expected):
  assert sorted(findings(source)) == sorted(expected)


def test_nothing_outside_the_backend_names_a_flavour_or_a_private_api():
  paths = _outside_backend()
  rel = {os.path.relpath(p, ROOT).replace(os.sep, "/") for p in paths}
  # The scan covers the Keras front end, the fast path and the rest of tf_dp.
  assert {"tf_dp/keras/losses.py", "tf_dp/keras/model_checks.py",
          "tf_dp/keras/private_model.py", "tf_dp/keras/callbacks.py",
          "tf_dp/keras/fast/clipped_sum.py", "tf_dp/keras/fast/rules.py",
          "tf_dp/reproductions/dpd.py"} <= rel
  found = _scan(paths)
  for path, reason in TF_KERAS_ALLOWED.items():
    if path in found:
      found[path] = [f for f in found[path] if f[1] != "tf.keras"] or None
      assert reason
  found = {path: uses for path, uses in found.items() if uses}
  assert not found, (
      "Keras flavour or private-API uses outside tf_dp/keras/backend/ (ask "
      "the adapter, tf_dp.keras.backend.for_object(obj), instead): "
      f"{found}")


def test_the_backend_holds_every_listed_use():
  found = _scan(_modules(BACKEND))
  kinds = {(kind, detail) for uses in found.values()
           for _, kind, detail in uses}
  assert {("import", "keras"), ("import", "tf_keras")} <= kinds
  missing = PRIVATE_ATTRIBUTES - {d for k, d in kinds if k == "private"}
  assert not missing, f"listed but never used in the backend: {missing}"
  # Each flavour's private uses stay in its own files.
  assert set(found) <= {f"tf_dp/keras/backend/{name}.py" for name in (
      "keras3", "keras2", "keras3_bases", "keras2_bases")}
