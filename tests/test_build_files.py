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


def _dependency_graph():
  """``{"//pkg:target": [deps within the repository]}`` from every BUILD."""
  graph = {}
  for dirpath, dirnames, filenames in os.walk(ROOT):
    dirnames[:] = [d for d in dirnames if not d.startswith(".")]
    if "BUILD" not in filenames:
      continue
    package = os.path.relpath(dirpath, ROOT).replace(os.sep, "/")

    def rule(name, deps=(), package=package, **kwargs):
      del kwargs
      graph[f"//{package}:{name}"] = [d for d in deps if d.startswith("//")]

    env = {"load": lambda *a, **k: None, "package": lambda **k: None,
           "exports_files": lambda *a, **k: None,
           "requirement": lambda name: "@pip//" + name,
           "py_library": rule, "py_test": rule, "py_binary": rule}
    path = os.path.join(dirpath, "BUILD")
    exec(compile(open(path).read(), path, "exec"), env)  # pylint: disable=exec-used
  return graph


def find_cycle(graph):
  """A dependency cycle ``[a, b, ..., a]`` of ``graph``, or None (what
  Bazel rejects)."""
  state, stack = {}, []

  def visit(node):
    state[node] = "open"
    stack.append(node)
    for dep in graph.get(node, ()):
      if state.get(dep) == "open":
        return stack[stack.index(dep):] + [dep]
      if dep not in state:
        cycle = visit(dep)
        if cycle:
          return cycle
    stack.pop()
    state[node] = "done"
    return None

  for node in sorted(graph):
    if node not in state:
      cycle = visit(node)
      if cycle:
        return cycle
  return None


def test_cycle_finder_rejects_a_cycle():
  assert find_cycle({"//a:x": ["//a:y"], "//a:y": ["//a:z"],
                     "//a:z": ["//a:x"]}) == [
                         "//a:x", "//a:y", "//a:z", "//a:x"]
  assert find_cycle({"//a:x": ["//a:y"], "//a:y": []}) is None


def test_build_dependency_graph_has_no_cycle():
  graph = _dependency_graph()
  assert len(graph) > 100  # Every package's targets were read.
  missing = sorted({d for deps in graph.values() for d in deps} - set(graph))
  assert not missing, f"Dependencies on undeclared targets: {missing}"
  cycle = find_cycle(graph)
  assert cycle is None, "Dependency cycle: " + " -> ".join(cycle)
