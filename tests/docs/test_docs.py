"""The documentation site: its reference is current, it builds in strict
mode, and every Python code block in it (and in the README) runs.

The docs show the default stack (TensorFlow 2.21, Keras 3); the docs tools
are installed there only (``setup.py``'s ``docs`` extra), so TF 2.15 skips
these tests.
"""

import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

def _tensorflow_version():
  from importlib import metadata  # pylint: disable=import-outside-toplevel
  return tuple(int(part) for part in metadata.version("tensorflow").split(".")[:2])


pytestmark = pytest.mark.skipif(
    _tensorflow_version() < (2, 16),
    reason="the docs show, and install their tools on, the TF 2.21 stack")

# A fenced Python block, unless the line before it says why it is not run.
_BLOCK = re.compile(r"^(<!-- not run: [^>]+-->\n)?```python\n(.*?)^```\s*$",
                    re.M | re.S)


def code_blocks(text):
  """The Python blocks of a page that are meant to run, in order."""
  return [m.group(2) for m in _BLOCK.finditer(text) if not m.group(1)]


def _pages():
  return sorted(DOCS.rglob("*.md")) + [ROOT / "README.md"]


PAGES_WITH_CODE = [p for p in _pages() if code_blocks(p.read_text())]


def test_code_block_parser():
  text = ("x\n```python\na = 1\n```\n<!-- not run: needs a GPU -->\n"
          "```python\nb = 2\n```\n```text\nc\n```\n")
  assert code_blocks(text) == ["a = 1\n"]


def test_reference_is_current():
  result = subprocess.run([sys.executable, "scripts/make_reference.py",
                           "--check"], cwd=ROOT, capture_output=True,
                          text=True)
  assert result.returncode == 0, result.stdout + result.stderr


def test_site_builds_strictly(tmp_path):
  # Strict mode: a broken link, anchor or reference, a page left out of the
  # navigation, or a docstring argument missing from its signature fails.
  result = subprocess.run(
      [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
       str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True)
  assert result.returncode == 0, result.stderr[-4000:]
  assert (tmp_path / "site" / "reference" / "keras" / "index.html").exists()


@pytest.mark.parametrize(
    "page", PAGES_WITH_CODE,
    ids=[str(p.relative_to(ROOT)) for p in PAGES_WITH_CODE])
def test_code_blocks_run(page, tmp_path, monkeypatch):
  # The blocks of a page share one namespace, in order, as a reader runs
  # them; each page starts afresh in its own directory.
  monkeypatch.chdir(tmp_path)
  namespace = {"__name__": "__docs__"}
  for index, block in enumerate(code_blocks(page.read_text()), 1):
    exec(compile(block, f"{page.relative_to(ROOT)} block {index}", "exec"),
         namespace)


def test_readme_links_resolve():
  # The README is read on GitHub and in a clone: its relative links must
  # name files that exist (the site's own links are checked by the build).
  text = (ROOT / "README.md").read_text()
  targets = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text)
  assert targets
  missing = [t for t in targets if not (ROOT / t).exists()]
  assert not missing, missing
