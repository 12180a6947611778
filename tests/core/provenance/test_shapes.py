"""The reshape rule against brute force (``tf_dp.core.provenance``).

A reshape of a tensor laid out by example (rows by example on axis 0,
``group`` rows each) is done on an array holding, in every entry, the
index of the example it belongs to; the rule's answer must agree with what
the reshaped array shows: when it says rows by example on an axis, every
row of that axis holds one example's entries, examples in order, ``group``
rows each; and it must say so whenever the reshape keeps examples in whole
rows (the rule is exact for sizes known when tracing).
"""

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import numpy as np

from tf_dp.core.provenance import reshapes as reshape_rule
from tf_dp.core.provenance.labels import EXAMPLES
from tf_dp.core.provenance.labels import Monomial
from tf_dp.core.provenance.labels import Rows


def _owners(examples, group, rest):
  """An array ``[examples * group, *rest]`` of each entry's example."""
  owner = np.repeat(np.arange(examples), group)
  return np.broadcast_to(owner.reshape((-1,) + (1,) * len(rest)),
                         (examples * group,) + tuple(rest))


def _layout(out):
  """``(axis, group)`` if ``out``'s first axis of size > 1 holds examples
  in order, ``group`` rows each, every row one example's; else None."""
  axis = next((a for a, d in enumerate(out.shape) if d != 1), None)
  if axis is None:
    return None
  rows = np.moveaxis(out, axis, 0).reshape(out.shape[axis], -1)
  if not np.all(rows == rows[:, :1]):
    return None
  owners = rows[:, 0]
  examples = owners.max() + 1
  if len(owners) % examples:
    return None
  group = len(owners) // examples
  if not np.array_equal(owners, np.repeat(np.arange(examples), group)):
    return None
  return axis, group


def _factorisations(total, parts, draw):
  """A random list of ``parts`` positive integers whose product is
  ``total``."""
  dims = []
  for _ in range(parts - 1):
    divisors = [d for d in range(1, total + 1) if total % d == 0]
    d = draw(st.sampled_from(divisors))
    dims.append(d)
    total //= d
  return dims + [total]


@st.composite
def reshape_cases(draw):
  examples = draw(st.integers(2, 5))
  group = draw(st.integers(1, 3))
  rest = draw(st.lists(st.integers(1, 4), min_size=0, max_size=3))
  total = examples * group * int(np.prod(rest, dtype=int))
  target = _factorisations(total, draw(st.integers(1, 4)), draw)
  return examples, group, rest, target


def _static(sizes):
  return [Monomial(int(d)) for d in sizes]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(reshape_cases())
def test_the_rule_agrees_with_the_reshaped_array(case):
  examples, group, rest, target = case
  out = _owners(examples, group, rest).reshape(target)
  truth = _layout(out)
  in_sizes = [Monomial(group, (EXAMPLES,))] + _static(rest)
  found = reshape_rule.reshaped(Rows(0, Monomial(group)), in_sizes,
                            _static(target))
  if found is None:
    # Exact for static sizes: a layout by example is always found.
    assert truth is None, (case, truth)
  else:
    assert truth is not None, case
    assert (found.axis, found.group) == (truth[0], Monomial(truth[1])), case


@settings(max_examples=200, deadline=None, derandomize=True)
@given(reshape_cases(), st.integers(1, 3))
def test_a_leading_size_that_counts_examples_is_rows_by_example(case, k):
  """A target whose first axis is ``N * k`` (``tf.shape`` of a tensor laid
  out by example) keeps whole blocks whenever the entries divide."""
  examples, group, rest, _ = case
  total = examples * group * int(np.prod(rest, dtype=int))
  if total % (examples * k):
    return
  target = [examples * k, total // (examples * k)]
  out = _owners(examples, group, rest).reshape(target)
  in_sizes = [Monomial(group, (EXAMPLES,))] + _static(rest)
  found = reshape_rule.reshaped(Rows(0, Monomial(group)), in_sizes,
                            [Monomial(k, (EXAMPLES,)),
                             Monomial(total // (examples * k))])
  assert found == Rows(0, Monomial(k))
  assert _layout(out) == (0, k) or (examples * k == 1)


def test_rows_that_straddle_examples_are_not_rows_by_example():
  in_sizes = [Monomial(1, (EXAMPLES,)), Monomial(6)]
  assert reshape_rule.reshaped(Rows(0), in_sizes, [Monomial(-1),
                                                Monomial(4)]) is None
  assert reshape_rule.reshaped(Rows(0), in_sizes, [Monomial(-1), Monomial(3)]) == (
      Rows(0, Monomial(2)))
