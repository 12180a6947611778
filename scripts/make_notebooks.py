"""Builds the tutorial notebooks from the cell-marked scripts.

``tutorials/tNN_*.py`` use ``# %%`` (code) and ``# %% [markdown]`` cells, the
format editors such as VS Code and Jupytext read. This writes
``tutorials/notebooks/tNN_*.ipynb`` (nbformat 4), Colab-style notebooks that
run top to bottom. ``--check`` exits 1 if a notebook is stale; a test runs it
and executes every notebook. The cells are those jupytext reads from the
same scripts; this stays a script so that the notebooks are byte-for-byte
reproducible (jupytext writes random cell ids) without a dependency.
"""

import glob
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCES = os.path.join(ROOT, "tutorials", "t[0-9][0-9]_*.py")
OUT = os.path.join(ROOT, "tutorials", "notebooks")


def cells_of(text):
  cells, kind, lines = [], None, []

  def flush():
    body = "\n".join(lines).strip("\n")
    if kind and body:
      if kind == "markdown":
        body = "\n".join(l[2:] if l.startswith("# ") else l.lstrip("#")
                         for l in body.splitlines())
      # nbformat 4.5 requires an id per cell; its position keeps the
      # output reproducible.
      cells.append({"cell_type": kind, "id": f"cell-{len(cells)}",
                    "metadata": {},
                    "source": body.splitlines(keepends=True),
                    **({"outputs": [], "execution_count": None}
                       if kind == "code" else {})})

  for line in text.splitlines():
    if line.startswith("# %%"):
      flush()
      kind, lines = ("markdown" if "[markdown]" in line else "code"), []
    else:
      lines.append(line)
  flush()
  return cells


def notebook_of(path):
  return {"nbformat": 4, "nbformat_minor": 5,
          "metadata": {"kernelspec": {"name": "python3",
                                      "display_name": "Python 3",
                                      "language": "python"},
                       "language_info": {"name": "python"}},
          "cells": cells_of(open(path, encoding="utf-8").read())}


def render(path):
  return json.dumps(notebook_of(path), indent=1, sort_keys=True) + "\n"


def target(path):
  return os.path.join(OUT, os.path.basename(path)[:-3] + ".ipynb")


def main(argv):
  stale = []
  os.makedirs(OUT, exist_ok=True)
  for path in sorted(glob.glob(SOURCES)):
    text = render(path)
    out = target(path)
    if not os.path.exists(out) or open(out).read() != text:
      stale.append(out)
      if "--check" not in argv:
        with open(out, "w") as f:
          f.write(text)
  if "--check" in argv and stale:
    print("Stale notebooks (run python scripts/make_notebooks.py): "
          + ", ".join(stale))
    return 1
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
