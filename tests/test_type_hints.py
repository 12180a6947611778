"""The public API of the accounting, the mechanisms, the DP step, the
samplers and the ledger is typed: every public function and method has a
hint for each argument and its return value; so are the names the Keras
front end exports (``tf_dp/keras/__init__.py``), and at least
``KERAS_ANNOTATED_SHARE`` of all the functions of ``tf_dp/keras`` (nested
ones included). ``mypy`` (``mypy.ini``, run by ``scripts/test.sh``) checks
that the hints hold, and the bodies of unannotated functions too, in every
package of tf_dp.

``python tests/test_type_hints.py`` prints the annotated share of
``tf_dp/keras``, per folder."""

import ast
import configparser
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
TYPED = ("tf_dp/analysis", "tf_dp/core", "tf_dp/data", "tf_dp/dp_query",
         "tf_dp/privacy_ledger.py", "tf_dp/correlated_noise_ledger.py",
         "tf_dp/sampling.py", "tf_dp/errors.py")
# Packages typed at the names their ``__init__.py`` imports.
TYPED_EXPORTS = ("tf_dp/keras/__init__.py",)
# The least share of the functions of tf_dp/keras (methods and nested
# functions included, lambdas not) with every hint.
KERAS_ANNOTATED_SHARE = 0.9


def _public_functions(tree):
  """``(qualified name, node)`` of module-level functions and methods of
  module-level classes whose names are public (``__init__`` included)."""
  for node in tree.body:
    if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
      yield node.name, node
    if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
      for item in node.body:
        if isinstance(item, ast.FunctionDef) and (
            not item.name.startswith("_")
            or item.name in ("__init__", "__new__")):
          yield f"{node.name}.{item.name}", item


def _missing_hints(fn):
  args = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
  missing = [a.arg for a in args
             if a.annotation is None and a.arg not in ("self", "cls")]
  missing += [f"*{a.arg}" for a in (fn.args.vararg, fn.args.kwarg)
              if a is not None and a.annotation is None]
  if fn.returns is None:
    missing.append("return")
  return missing


def _exported(root, init):
  """``(file, tree, names)`` for each module that ``init`` (a package's
  ``__init__.py``) imports public names from."""
  by_module = {}
  for node in ast.parse((root / init).read_text()).body:
    if isinstance(node, ast.ImportFrom) and node.module:
      names = {a.asname or a.name for a in node.names}
      by_module.setdefault(node.module, set()).update(
          n for n in names if not n.startswith("_"))
  for module, names in sorted(by_module.items()):
    file = root / (module.replace(".", "/") + ".py")
    if names and file.is_file():
      yield file, ast.parse(file.read_text(), str(file)), names


def unannotated(root):
  """``[(path, function, what is missing)]`` under the TYPED paths and for
  the names TYPED_EXPORTS export."""
  modules = []
  for typed in TYPED:
    path = root / typed
    for file in sorted([path] if path.is_file() else path.rglob("*.py")):
      modules.append((file, ast.parse(file.read_text(), str(file)), None))
  for init in TYPED_EXPORTS:
    if (root / init).is_file():
      modules.extend(_exported(root, init))
  found = []
  for file, tree, names in modules:
    for name, fn in _public_functions(tree):
      if names is not None and name.split(".")[0] not in names:
        continue
      missing = _missing_hints(fn)
      if missing:
        found.append((str(file.relative_to(root)), name, missing))
  return found


def annotated_functions(root, package):
  """``{folder: (annotated, functions)}`` over every ``def`` under
  ``package`` (methods and nested functions included): a function counts
  as annotated when its return value and each argument but ``self`` /
  ``cls`` have a hint."""
  counts = {}
  for file in sorted((root / package).rglob("*.py")):
    folder = str(file.parent.relative_to(root))
    done, total = counts.get(folder, (0, 0))
    for node in ast.walk(ast.parse(file.read_text(), str(file))):
      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        total += 1
        done += not _missing_hints(node)
    counts[folder] = (done, total)
  return counts


def _share(counts):
  done = sum(d for d, _ in counts.values())
  total = sum(t for _, t in counts.values())
  return done / total if total else 1.0


def test_public_api_is_typed():
  assert unannotated(ROOT) == []


def test_a_missing_hint_is_found(tmp_path):
  (tmp_path / "tf_dp" / "analysis").mkdir(parents=True)
  (tmp_path / "tf_dp" / "analysis" / "m.py").write_text(
      "def f(x: int, y) -> int:\n  return x\n"
      "def _private(x):\n  return x\n"
      "class C:\n  def g(self, x: int):\n    return x\n")
  assert unannotated(tmp_path) == [
      ("tf_dp/analysis/m.py", "f", ["y"]),
      ("tf_dp/analysis/m.py", "C.g", ["return"])]


def test_a_missing_hint_on_an_exported_name_is_found(tmp_path):
  (tmp_path / "tf_dp" / "keras").mkdir(parents=True)
  (tmp_path / "tf_dp" / "keras" / "__init__.py").write_text(
      "from tf_dp.keras.m import f, C\n")
  (tmp_path / "tf_dp" / "keras" / "m.py").write_text(
      "def f(x):\n  return x\n"
      "def unexported(x):\n  return x\n"
      "class C:\n  def __new__(cls, x: int):\n    return x\n")
  assert unannotated(tmp_path) == [
      ("tf_dp/keras/m.py", "f", ["x", "return"]),
      ("tf_dp/keras/m.py", "C.__new__", ["return"])]


def mypy_unchecked(root):
  """The modules of ``root/tf_dp`` that ``mypy.ini`` does not check, and
  its sections that check less than ``[mypy]``."""
  config = configparser.ConfigParser()
  config.read(root / "mypy.ini")
  files = [f.strip().rstrip("/") for f in config["mypy"]["files"].split(",")]
  modules = [str(p.relative_to(root)) for p in (root / "tf_dp").rglob("*.py")]
  missing = sorted(m for m in modules if not any(
      m == f or m.startswith(f + "/") for f in files))
  weaker = sorted(
      name for name in config.sections() if name.startswith("mypy-") and (
          config[name].get("check_untyped_defs", "True") != "True"
          or config[name].get("ignore_errors", "False") != "False"))
  return missing, weaker


def test_mypy_checks_every_package_of_tf_dp():
  assert mypy_unchecked(ROOT) == ([], [])


def test_a_package_left_out_of_mypy_is_found(tmp_path):
  for package in ("tf_dp", "tf_dp/core", "tf_dp/core/inner", "tf_dp/cli"):
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text("")
  (tmp_path / "tf_dp" / "errors.py").write_text("")
  (tmp_path / "mypy.ini").write_text(
      "[mypy]\nfiles = tf_dp/__init__.py, tf_dp/core\n"
      "[mypy-tf_dp.core.inner]\ncheck_untyped_defs = False\n")
  assert mypy_unchecked(tmp_path) == (
      ["tf_dp/cli/__init__.py", "tf_dp/errors.py"], ["mypy-tf_dp.core.inner"])


def test_keras_front_end_is_annotated():
  counts = annotated_functions(ROOT, "tf_dp/keras")
  assert _share(counts) >= KERAS_ANNOTATED_SHARE, counts


def test_annotated_share_counts_nested_functions(tmp_path):
  (tmp_path / "p").mkdir()
  (tmp_path / "p" / "m.py").write_text(
      "def f(x: int) -> int:\n"
      "  def g(y):\n    return y\n"
      "  return g(x)\n"
      "class C:\n  def h(self) -> None:\n    pass\n"
      "  def k(self, *args) -> None:\n    pass\n")
  counts = annotated_functions(tmp_path, "p")
  assert counts == {"p": (2, 4)}
  assert _share(counts) == 0.5


if __name__ == "__main__":
  found = annotated_functions(ROOT, "tf_dp/keras")
  for name, (annotated, functions) in sorted(found.items()):
    print(f"{name}: {annotated} of {functions}")
  print(f"tf_dp/keras: {_share(found):.1%} of functions annotated")
