"""Eq. (1), the one home of the effective noise multiplier."""

import math

import pytest

from tf_dp import analysis
from tf_dp.analysis import allocation


def test_eq1_by_hand():
  z = allocation.effective_noise_multiplier([1.0, 0.5], [2.0, 3.0])
  assert z == pytest.approx(((1 / 2) ** 2 + (0.5 / 3) ** 2) ** -0.5)


def test_what_is_released():
  f = allocation.effective_noise_multiplier
  assert f([], []) == math.inf                         # nothing at all
  assert f([0.0, 0.0], [0.0, 1.0]) == math.inf         # clip 0 releases nothing
  assert f([1.0], [math.inf]) == math.inf              # infinite noise
  assert f([1.0, 1.0], [2.0, 0.0]) == 0.0              # one group unnoised
  assert f([math.inf], [1.0]) == 0.0                   # unbounded record
  assert f([math.inf], [math.inf]) == 0.0              # never NaN: no privacy
  assert f([1.0, 0.0], [2.0, 0.0]) == 2.0


@pytest.mark.parametrize("clips,stddevs,match", [
    ([-1.0], [1.0], r"clips\[0\] must be a real number in \[0, inf\]"),
    ([1.0, 1.0], [1.0, math.nan], r"stddevs\[1\].*got nan"),
    ([1.0], [1.0, 2.0], "one entry per group"),
])
def test_bad_input_names_the_entry(clips, stddevs, match):
  with pytest.raises(ValueError, match=match):
    allocation.effective_noise_multiplier(clips, stddevs)


def test_the_mechanisms_and_the_ledger_use_this_formula():
  tf = pytest.importorskip("tensorflow")
  del tf
  from tf_dp.dp_query import allocation as dp_allocation  # pylint: disable=g-import-not-at-top
  assert dp_allocation.effective_noise_multiplier is (
      allocation.effective_noise_multiplier)
  assert analysis.effective_noise_multiplier is (
      allocation.effective_noise_multiplier)
  assert analysis.sample_noise_multiplier(
      [{"l2_norm_clip": 1.0, "noise_stddev": 2.0}, (0.5, 3.0)]) == (
          allocation.effective_noise_multiplier([1.0, 0.5], [2.0, 3.0]))
