"""--stack-share (tests/conftest.py) splits the Keras 2 cases and the
stack-independent files between the two stacks: each runs on exactly one, a
share group's cases on the same one, every other case on both."""

import os

import pytest

pytest_plugins = ["pytester"]

_CONFTEST = os.path.join(os.path.dirname(__file__), "conftest.py")

_TESTS = '''
import pytest

@pytest.mark.parametrize("K", ["keras3", "keras2"])
@pytest.mark.parametrize("n", range(12))
def test_flavoured(K, n):
  pass

@pytest.mark.slow
@pytest.mark.parametrize("K", ["keras3", "keras2"])
def test_slow(K):
  pass

@pytest.mark.parametrize("n", range(4))
def test_plain(n):
  pass

@pytest.mark.share_group("one worker")
@pytest.mark.parametrize("K", ["keras3", "keras2"])
@pytest.mark.parametrize("n", range(12))
def test_grouped(K, n):
  pass
'''

_INDEPENDENT = '''
import pytest

pytestmark = pytest.mark.stack_independent

@pytest.mark.parametrize("n", range(12))
def test_pure(n):
  pass
'''


def _collected(pytester, *args):
  result = pytester.runpytest("--collect-only", "-q", "-p", "no:cacheprovider",
                              *args)
  return {line for line in result.outlines if "::" in line}


def test_keras2_cases_run_once_and_every_other_case_on_both(pytester):
  with open(_CONFTEST, encoding="utf-8") as f:
    pytester.makeconftest(f.read())
  pytester.makeini("[pytest]\nmarkers =\n    slow: slow\n"
                   "    share_group: group\n    stack_independent: pure\n")
  pytester.makepyfile(test_cases=_TESTS, test_pure=_INDEPENDENT)
  everything = _collected(pytester)
  assert len(everything) == 12 * 2 + 2 + 4 + 12 * 2 + 12
  first = _collected(pytester, "--stack-share=tf221")
  second = _collected(pytester, "--stack-share=tf215")
  shared = {t for t in everything if ("keras2" in t and "test_slow" not in t)
            or "test_pure" in t}
  assert first | second == everything
  assert first & second == everything - shared
  # A stable split that gives each stack some of the 12 shared cases of
  # each test, and all of a share group's cases to one stack.
  for name in ("test_flavoured", "test_pure"):
    cases = {t for t in shared if name in t}
    assert len(cases) == 12 and 0 < len(cases & first) < len(cases)
  grouped = {t for t in shared if "test_grouped" in t}
  assert len(grouped) == 12 and (grouped <= first or grouped <= second)
