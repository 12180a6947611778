"""Tests of tf_dp.dp_query.events: event value objects and their flattening."""

import pytest

from tf_dp.dp_query import events
from tf_dp.errors import PrivacyError


def test_flatten_events_lists_sum_queries_in_nest_order():
  a, b, c = (events.SumQueryEvent(1.0, s) for s in (0.5, 1.5, 2.5))
  nested = {"z": a, "a": (b, events.NoOpEvent(), [None, c])}
  assert events.flatten_events(nested) == [b, c, a]  # keys sorted
  assert events.flatten_events(a) == [a]


def test_nothing_released_flattens_to_nothing():
  assert events.flatten_events(events.NoOpEvent()) == []
  assert events.flatten_events(None) == []
  assert events.flatten_events((events.NoOpEvent(), {})) == []


def test_a_correlated_noise_event_is_refused_anywhere_in_the_nest():
  """Its privacy is not that of independent Gaussian sums: flattening it
  into SumQueryEvents would under-report epsilon."""
  event = events.CorrelatedNoiseEvent(1.0, 2.0, 3)
  for nest in (event, (events.SumQueryEvent(1.0, 1.0), {"k": event})):
    with pytest.raises(PrivacyError, match="CorrelatedNoiseLedger"):
      events.flatten_events(nest)


def test_anything_else_is_not_an_event():
  with pytest.raises(TypeError, match="Not a DP event: 3.0"):
    events.flatten_events((events.SumQueryEvent(1.0, 1.0), 3.0))


def test_events_are_slotted_value_objects_with_a_readable_repr():
  e = events.SumQueryEvent(1.0, 2.0)
  assert repr(e) == "SumQueryEvent(l2_norm_clip=1.0, noise_stddev=2.0)"
  assert repr(events.CorrelatedNoiseEvent(1.0, 2.0, 7)) == (
      "CorrelatedNoiseEvent(l2_norm_clip=1.0, noise_stddev=2.0, step=7)")
  assert repr(events.NoOpEvent()) == "NoOpEvent()"
  with pytest.raises(AttributeError):
    e.sampling_probability = 0.1  # __slots__: no stray fields
