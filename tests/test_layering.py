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


def upward_imports(root):
  """``[(module, imported, why)]`` for every import that breaks LAYERS."""
  modules = module_names(root)
  found = []
  for module, path in sorted(modules.items()):
    own = layer_of(module)
    if own is None:
      found.append((module, None, "is in no layer: add it to LAYERS"))
      continue
    for target in imported_modules(module, path, modules):
      layer = layer_of(target)
      if layer is not None and layer > own:
        found.append((module, target, f"{LAYERS[own][0]} imports "
                                      f"{LAYERS[layer][0]}"))
  return found


def test_tf_dp_imports_only_downwards():
  assert upward_imports(ROOT) == []


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
