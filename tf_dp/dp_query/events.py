"""Descriptions of what a mechanism did, returned by ``get_noised_result``.

An event is a plain value object (in the spirit of dp_accounting's events):
``SumQueryEvent(l2_norm_clip, noise_stddev)`` says that a Gaussian sum query
clipped each record to ``l2_norm_clip`` and added N(0, noise_stddev^2 I) once
to the sum; ``NoOpEvent`` says that nothing private was released. Fields may
be tensors inside a graph. Events nest in tuples for composite queries.
"""

from typing import Any, List

from tf_dp.errors import PrivacyError


class SumQueryEvent:
  """A Gaussian sum query with privacy tuple (l2_norm_clip, noise_stddev)."""

  __slots__ = ("l2_norm_clip", "noise_stddev")

  def __init__(self, l2_norm_clip: Any, noise_stddev: Any) -> None:
    self.l2_norm_clip = l2_norm_clip
    self.noise_stddev = noise_stddev

  def __repr__(self):
    return (f"SumQueryEvent(l2_norm_clip={self.l2_norm_clip!r}, "
            f"noise_stddev={self.noise_stddev!r})")


class CorrelatedNoiseEvent:
  """Sample ``step`` of a correlated-noise mechanism: records clipped to
  ``l2_norm_clip``, noise ``w_step`` of ``C^+ z`` with ``z`` of stddev
  ``noise_stddev`` (``CorrelatedNoiseQuery``). Not an independent Gaussian
  sum query: it is accounted from the strategy's sensitivity, never from
  sampling."""

  __slots__ = ("l2_norm_clip", "noise_stddev", "step")

  def __init__(self, l2_norm_clip: Any, noise_stddev: Any, step: Any) -> None:
    self.l2_norm_clip = l2_norm_clip
    self.noise_stddev = noise_stddev
    self.step = step

  def __repr__(self):
    return (f"CorrelatedNoiseEvent(l2_norm_clip={self.l2_norm_clip!r}, "
            f"noise_stddev={self.noise_stddev!r}, step={self.step!r})")


class NoOpEvent:
  """Nothing computed from private data was released."""

  __slots__ = ()

  def __repr__(self):
    return "NoOpEvent()"


def flatten_events(event: Any) -> List[SumQueryEvent]:
  """Returns the ``SumQueryEvent`` leaves of a nested event, in order."""
  if isinstance(event, SumQueryEvent):
    return [event]
  if isinstance(event, NoOpEvent) or event is None:
    return []
  if isinstance(event, CorrelatedNoiseEvent):
    raise PrivacyError(
        "A CorrelatedNoiseEvent (correlated noise across samples) cannot be "
        "recorded as independent Gaussian sum queries: its privacy is that "
        "of the strategy's sensitivity, not of each sample on its own. "
        "Record it in a CorrelatedNoiseLedger.")
  if isinstance(event, dict):
    return [e for k in sorted(event) for e in flatten_events(event[k])]
  if isinstance(event, (list, tuple)):
    return [e for sub in event for e in flatten_events(sub)]
  raise TypeError(f"Not a DP event: {event!r}")
