"""Tests of the one doubling + bisection search (tf_dp.analysis.search)."""

import math

import pytest

from tf_dp.analysis import search


def counting(predicate):
  calls = []

  def wrapped(x):
    calls.append(x)
    return predicate(x)
  return wrapped, calls


@pytest.mark.parametrize("boundary", [0, 1, 2, 3, 17, 1000, 123456])
def test_integer_boundary(boundary):
  pred, calls = counting(lambda k: k <= boundary)
  assert search.monotone_boundary(pred, 0, 10 ** 9) == (boundary,
                                                        boundary + 1)
  # Doubling then bisection: O(log boundary) probes, not boundary.
  assert len(calls) <= 2 * math.log2(boundary + 2) + 2


def test_integer_limit_reached():
  assert search.monotone_boundary(lambda k: True, 1, 50) == (50, None)
  assert search.monotone_boundary(lambda k: k < 50, 1, 50) == (49, 50)


def test_real_boundary_within_tolerance():
  lo, hi = search.monotone_boundary(lambda x: x < math.pi, 0.0, 1e4,
                                    integer=False, tolerance=1e-6)
  assert lo < math.pi <= hi and hi - lo <= 1e-6 * hi


def test_real_boundary_near_zero_terminates():
  lo, hi = search.monotone_boundary(lambda x: False, 0.0, 1e4,
                                    integer=False, tolerance=1e-3)
  assert lo == 0.0 and 0 < hi <= 1e-12


@pytest.mark.parametrize("tolerance", [0, -1e-3, math.nan, 1.0, None, True])
def test_real_search_needs_a_valid_tolerance(tolerance):
  with pytest.raises(ValueError, match="tolerance"):
    search.monotone_boundary(lambda x: x < 1, 0.0, 10.0, integer=False,
                             tolerance=tolerance)
