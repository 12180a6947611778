"""tf_dp's layers, lowest first: a module imports only from its own layer
and the layers below it (docs/development.md, "How the code is organised").

The import graph is read from the source with ``ast`` (every ``import``,
also inside functions), so a lazy import counts like any other.
"""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "tf_dp"

# (layer, its packages and modules), lowest first.
LAYERS = (
    ("vocabulary", ("tf_dp.errors", "tf_dp.sampling")),
    ("accounting", ("tf_dp.analysis",)),
    ("mechanisms", ("tf_dp.dp_query", "tf_dp.privacy_ledger",
                    "tf_dp.correlated_noise_ledger")),
    ("DP step and samplers", ("tf_dp.core", "tf_dp.data")),
    ("front ends", ("tf_dp.keras", "tf_dp.estimator")),
    ("applications", ("tf_dp", "tf_dp.reproductions", "tf_dp.cli",
                      "tf_dp.compat")),
)

# tf_dp.keras's own layers, lowest first, by module name inside tf_dp.keras
# (a package stands for its modules; ``__init__`` is tf_dp/keras/__init__.py).
# Every module of tf_dp.keras must be listed.
KERAS_LAYERS = (
    ("Keras adapters", ("backend",)),
    ("model checks and per-example gradients",
     ("model_checks", "losses", "per_example", "privacy_gate",
      "dp_batch_norm")),
    ("fast clipping rules", ("fast",)),
    ("the DP step and engine",
     ("dp_step", "first_batch", "dp_engine", "privacy_check", "fit_arguments",
      "fit_sampling", "fit_order", "fit_correlated_noise", "fit_distribution",
      "optimizer_state", "written_metrics")),
    ("the DP optimizer and the flavour classes",
     ("optimizer_base", "flavor_classes", "optimizer", "layers",
      "layers_keras2")),
    ("front door", ("private_model", "callbacks", "group_norm", "canaries",
                    "membership_inference", "__init__")),
)
KERAS = "tf_dp.keras"


def module_names(root):
  """``{dotted module name: path}`` of every module under ``root``."""
  names = {}
  for path in root.rglob("*.py"):
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
      parts.pop()
    names[".".join(parts)] = path
  return names


def layer_of(module):
  """The index in LAYERS of the longest listed prefix of ``module``."""
  best, depth = None, -1
  for index, (_, members) in enumerate(LAYERS):
    for member in members:
      if (module == member or module.startswith(member + ".")) and (
          member.count(".") > depth):
        best, depth = index, member.count(".")
  return best


def imported_modules(module, path, modules):
  """The tf_dp modules that ``module`` (at ``path``) imports."""
  package = module if path.name == "__init__.py" else module.rpartition(".")[0]
  for node in ast.walk(ast.parse(path.read_text(), str(path))):
    if isinstance(node, ast.Import):
      targets = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:
        anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
        base = ".".join(anchor + ([base] if base else []))
      # ``from a import b`` imports module a.b if there is one, else a.
      targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules
                 else base for alias in node.names]
    else:
      continue
    yield from (t for t in targets if t == "tf_dp" or t.startswith("tf_dp."))


def _upward(root, in_scope, layer_of_module, layers, listing):
  """``[(module, imported, why)]`` for every import between modules
  ``in_scope`` that goes up ``layers`` (``layer_of_module`` gives a
  module's index), and every module in no layer (add it to ``listing``)."""
  modules = module_names(root)
  found = []
  for module, path in sorted(modules.items()):
    if not in_scope(module):
      continue
    own = layer_of_module(module)
    if own is None:
      found.append((module, None, f"is in no layer: add it to {listing}"))
      continue
    for target in imported_modules(module, path, modules):
      layer = layer_of_module(target) if in_scope(target) else None
      if layer is not None and layer > own:
        found.append((module, target, f"{layers[own][0]} imports "
                                      f"{layers[layer][0]}"))
  return found


def upward_imports(root):
  """``[(module, imported, why)]`` for every import that breaks LAYERS."""
  return _upward(root, lambda module: True, layer_of, LAYERS, "LAYERS")


def test_tf_dp_imports_only_downwards():
  assert upward_imports(ROOT) == []


def keras_layer_of(module):
  """The index in KERAS_LAYERS of ``module`` (in tf_dp.keras), or None."""
  name = module[len(KERAS) + 1:] if module != KERAS else "__init__"
  for index, (_, members) in enumerate(KERAS_LAYERS):
    if any(name == m or name.startswith(m + ".") for m in members):
      return index
  return None


def upward_keras_imports(root):
  """``[(module, imported, why)]`` for every import inside tf_dp.keras that
  breaks KERAS_LAYERS."""
  in_keras = lambda module: module == KERAS or module.startswith(KERAS + ".")
  return _upward(root, in_keras, keras_layer_of, KERAS_LAYERS, "KERAS_LAYERS")


def test_tf_dp_keras_imports_only_downwards():
  assert upward_keras_imports(ROOT) == []


def test_every_listed_keras_layer_member_exists():
  modules = module_names(ROOT)
  for _, members in KERAS_LAYERS:
    for member in members:
      name = KERAS if member == "__init__" else f"{KERAS}.{member}"
      assert name in modules, f"{member} is listed in KERAS_LAYERS but is " \
          "not a module of tf_dp.keras"


@pytest.mark.parametrize("source,found", [
    ("from tf_dp.keras import optimizer\n",
     [("tf_dp.analysis.planted", "tf_dp.keras.optimizer",
       "accounting imports front ends")]),
    ("def f():\n  import tf_dp.core.lot\n",
     [("tf_dp.analysis.planted", "tf_dp.core.lot",
       "accounting imports DP step and samplers")]),
    ("from tf_dp import keras\n",
     [("tf_dp.analysis.planted", "tf_dp.keras",
       "accounting imports front ends")]),
    ("import tf_dp\n",
     [("tf_dp.analysis.planted", "tf_dp", "accounting imports applications")]),
    ("from tf_dp.analysis import checks\nfrom tf_dp import sampling\n", []),
])
def test_a_planted_upward_import_is_found(tmp_path, source, found):
  for package in ("tf_dp", "tf_dp/analysis", "tf_dp/keras", "tf_dp/core"):
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text("")
  for module in ("analysis/checks", "keras/optimizer", "core/lot",
                 "sampling"):
    (tmp_path / f"tf_dp/{module}.py").write_text("")
  (tmp_path / "tf_dp/analysis/planted.py").write_text(source)
  assert upward_imports(tmp_path / "tf_dp") == found


@pytest.mark.parametrize("module,source,found", [
    ("backend/keras3", "from tf_dp.keras import dp_engine\n",
     [("tf_dp.keras.backend.keras3", "tf_dp.keras.dp_engine",
       "Keras adapters imports the DP step and engine")]),
    ("fast/rules", "def f():\n  from tf_dp.keras import optimizer\n",
     [("tf_dp.keras.fast.rules", "tf_dp.keras.optimizer",
       "fast clipping rules imports the DP optimizer and the flavour "
       "classes")]),
    ("model_checks", "import tf_dp.keras\n",
     [("tf_dp.keras.model_checks", "tf_dp.keras",
       "model checks and per-example gradients imports front door")]),
    ("dp_engine", "from tf_dp.keras.fast import rules\n"
     "from tf_dp.keras import backend\nfrom tf_dp.core import lot\n", []),
    ("planted", "", [("tf_dp.keras.planted", None,
                      "is in no layer: add it to KERAS_LAYERS")]),
])
def test_a_planted_upward_import_inside_tf_dp_keras_is_found(
    tmp_path, module, source, found):
  for package in ("tf_dp", "tf_dp/keras", "tf_dp/keras/backend",
                  "tf_dp/keras/fast", "tf_dp/core"):
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text("")
  for name in ("backend/keras3", "fast/rules", "model_checks", "dp_engine",
               "optimizer", "core/lot"):
    path = tmp_path / "tf_dp" / ("" if name.startswith("core") else "keras") / (
        f"{name}.py")
    path.write_text("")
  (tmp_path / "tf_dp" / "keras" / f"{module}.py").write_text(source)
  assert upward_keras_imports(tmp_path / "tf_dp") == found
