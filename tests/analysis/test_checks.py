"""The one argument-check module: messages name the argument, the value
and the domain (and the fix, where given); bools are never numbers."""

import math

import numpy as np
import pytest

from tf_dp.analysis import checks


@pytest.mark.parametrize("call,match", [
    (lambda: checks.check_non_negative("stddev", -1.0,
                                       " Use stddev = z * clip."),
     r"^stddev must be a finite real number >= 0; got -1\.0\. Use stddev"),
    (lambda: checks.check_positive("denominator", 0.0),
     r"^denominator must be a finite real number > 0; got 0\.0\.$"),
    (lambda: checks.check_positive("l2_norm_clip", -1.0),
     r"^l2_norm_clip must be a finite real number > 0; got -1\.0\.$"),
    (lambda: checks.check_probability("q", 1.5),
     r"^q must be a probability in \[0, 1\]; got 1\.5\.$"),
    (lambda: checks.check_sampling_probability("sampling_probability", -0.1),
     r"^sampling_probability must be a probability .*It is q, the "
     r"probability that a record is in a lot"),
    (lambda: checks.check_positive_int("batches_per_lot", 0,
                                       " It is the accumulation."),
     r"^batches_per_lot must be an integer >= 1; got 0\. It is"),
    (lambda: checks.check_steps("steps", -1), r"^steps must be an integer"),
    (lambda: checks.check_choice("sampling", "shuffle", ("poisson",)),
     r"^sampling must be one of \('poisson',\); got 'shuffle'\.$"),
    (lambda: checks.check_tolerance("tolerance", 0.0),
     r"^tolerance must be a real number in \(0, 1\); got 0\.0\.$"),
    (lambda: checks.check_real("rho", math.nan, low=0.0),
     r"^rho must be a real number in \[0, inf\]; got nan\.$"),
    (lambda: checks.check_delta("delta", 1.0), r"^delta must lie in \(0, 1\)"),
    (lambda: checks.check_epsilon("target_epsilon", 0.0, allow_zero=False),
     r"^target_epsilon must be a real number > 0; got 0\.0\.$"),
])
def test_messages_name_the_argument_value_and_domain(call, match):
  with pytest.raises(ValueError, match=match):
    call()


@pytest.mark.parametrize("check", [
    lambda v: checks.check_probability("q", v),
    lambda v: checks.check_non_negative("x", v),
    lambda v: checks.check_positive_int("n", v),
    lambda v: checks.check_noise_multiplier("noise_multiplier", v),
])
def test_booleans_are_not_numbers(check):
  for value in (True, np.bool_(True), np.array(True)):
    with pytest.raises(ValueError, match="got"):
      check(value)


def test_numpy_scalars_and_0d_arrays_are_numbers():
  assert checks.check_probability("q", np.float32(0.5)) == 0.5
  assert checks.check_probability("q", np.array(0.25)) == 0.25
  assert checks.check_positive_int("n", np.int64(3)) == 3
  assert checks.check_positive_int("n", np.array(7)) == 7


def test_integral_floats_only_where_allowed():
  with pytest.raises(ValueError, match="an integer >= 1"):
    checks.check_positive_int("max_samples", 1e5)
  assert checks.check_positive_int("max_samples", 1e5,
                                   integral_float=True) == 100000
  with pytest.raises(ValueError, match="got 2.5"):
    checks.check_steps("count", 2.5, integral_float=True)
  with pytest.raises(ValueError, match="got inf"):
    checks.check_steps("count", math.inf, integral_float=True)
