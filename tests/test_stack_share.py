"""--stack-share (tests/conftest.py) splits the Keras 2 cases between the
two stacks: each runs on exactly one, every other case on both."""

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
'''


def _collected(pytester, *args):
  result = pytester.runpytest("--collect-only", "-q", "-p", "no:cacheprovider",
                              *args)
  return {line for line in result.outlines if "::" in line}


def test_keras2_cases_run_once_and_every_other_case_on_both(pytester):
  with open(_CONFTEST, encoding="utf-8") as f:
    pytester.makeconftest(f.read())
  pytester.makeini("[pytest]\nmarkers =\n    slow: slow\n")
  pytester.makepyfile(test_cases=_TESTS)
  everything = _collected(pytester)
  assert len(everything) == 12 * 2 + 2 + 4
  first = _collected(pytester, "--stack-share=tf221")
  second = _collected(pytester, "--stack-share=tf215")
  shared = {t for t in everything if "keras2" in t and "test_slow" not in t}
  assert first | second == everything
  assert first & second == everything - shared
  # A stable split that gives each stack some of the 12 shared cases.
  assert 0 < len(shared & first) < len(shared)
