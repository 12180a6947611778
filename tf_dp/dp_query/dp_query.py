"""The ``DPQuery`` interface: a differentially private aggregate with explicit state.

A query estimates an aggregate (a sum or an average) of records drawn in one
sample. All state is explicit: every method takes the state it needs and
returns the new state, so one query runs eagerly, in ``tf.function``, under
``tf.vectorized_map`` (``preprocess_record``) and per replica under
``tf.distribute`` (``accumulate``/``merge`` per replica, ``get_noised_result``
once per global batch).

The life of one sample::

  global_state = query.initial_global_state()          # once
  params = query.derive_sample_params(global_state)    # per sample
  sample_state = query.initial_sample_state(template)
  for record in sample:                                # or vectorised
    sample_state = query.accumulate_record(params, sample_state, record)
  result, global_state, event = query.get_noised_result(sample_state,
                                                        global_state)

Privacy contract of every implementation: ``preprocess_record`` bounds each
record's contribution (clipping lives there), noise is added only in
``get_noised_result``, exactly once per sample, and the returned ``event``
describes exactly the mechanism applied (see ``events.py``).
"""

import abc
from typing import Any, Dict, Tuple

import tensorflow as tf

from tf_dp.errors import RecordStructureError

# A tf.nest structure of tensors: a query's states, records, parameters,
# results and events.
Nest = Any


class DPQuery(metaclass=abc.ABCMeta):
  """Interface of differentially private queries (McMahan & Andrew 2018)."""

  def initial_global_state(self) -> Nest:
    """Returns the state kept across samples (e.g. clip norm, noise seed)."""
    return ()

  def derive_sample_params(self, global_state: Nest) -> Nest:
    """Returns the parameters used to process each record of one sample."""
    del global_state
    return ()

  @abc.abstractmethod
  def initial_sample_state(self, template: Nest = None) -> Nest:
    """Returns an empty sample state shaped like ``template`` (a nest of
    tensors or ``tf.TensorSpec``s with the structure of one record)."""

  def preprocess_record(self, params: Nest, record: Nest) -> Nest:
    """Bounds one record's contribution (clips it); pure and per-record."""
    del params
    return record

  @abc.abstractmethod
  def accumulate_preprocessed_record(self, sample_state: Nest,
                                     preprocessed_record: Nest) -> Nest:
    """Adds a preprocessed record to the sample state."""

  def accumulate_record(self, params: Nest, sample_state: Nest,
                        record: Nest) -> Nest:
    """Preprocesses ``record`` and adds it to ``sample_state``."""
    return self.accumulate_preprocessed_record(
        sample_state, self.preprocess_record(params, record))

  @abc.abstractmethod
  def merge_sample_states(self, sample_state_1: Nest,
                          sample_state_2: Nest) -> Nest:
    """Merges two sample states (e.g. from two replicas or microbatches)."""

  @abc.abstractmethod
  def get_noised_result(self, sample_state: Nest,
                        global_state: Nest) -> Tuple[Nest, Nest, Nest]:
    """Adds the noise once and returns ``(result, new_global_state, event)``."""

  def derive_metrics(self, global_state: Nest) -> Dict[str, Any]:
    """Returns a dict of public metrics of the global state (e.g. the clip)."""
    del global_state
    return {}

  # Optional: clipping from norms (the fast per-example path).
  def supports_record_scales(self) -> bool:
    """True if ``record_scales`` and ``preprocessed_sum`` are implemented."""
    return False

  def record_scales(self, params: Nest, sq_norms: Nest) -> Tuple[Nest, Nest]:
    """Per-record scale factors from per-record squared norms.

    Args:
      params: From ``derive_sample_params``.
      sq_norms: A nest shaped like one record whose leaves are ``[R]``
        tensors: the squared L2 norm of that leaf for each of R records
        (all finite).

    Returns:
      ``(scales, extra)``: ``scales`` shaped like ``sq_norms`` such that
      ``preprocess_record`` of record r multiplies its leaf by
      ``scales[leaf][r]``; ``extra`` a nest of ``[R]`` per-record values
      (e.g. clipping indicators) summed over records for
      ``preprocessed_sum``.
    """
    raise NotImplementedError

  def preprocessed_sum(self, scaled_sum: Nest, extra_sum: Nest) -> Nest:
    """The sum of preprocessed records from the scaled sum and extra sums."""
    raise NotImplementedError


class WrapperQuery(DPQuery):
  """A query that runs another: each method is the wrapped query's unless
  a subclass overrides it.

  Privacy contract: that of the wrapped query, changed only by what the
  subclass's overrides state.
  """

  def __init__(self, wrapped: DPQuery) -> None:
    self._wrapped = wrapped

  def initial_global_state(self) -> Nest:
    return self._wrapped.initial_global_state()

  def derive_sample_params(self, global_state: Nest) -> Nest:
    return self._wrapped.derive_sample_params(global_state)

  def initial_sample_state(self, template: Nest = None) -> Nest:
    return self._wrapped.initial_sample_state(template)

  def preprocess_record(self, params: Nest, record: Nest) -> Nest:
    return self._wrapped.preprocess_record(params, record)

  def accumulate_preprocessed_record(self, sample_state: Nest,
                                     preprocessed_record: Nest) -> Nest:
    return self._wrapped.accumulate_preprocessed_record(sample_state,
                                                        preprocessed_record)

  def merge_sample_states(self, sample_state_1: Nest,
                          sample_state_2: Nest) -> Nest:
    return self._wrapped.merge_sample_states(sample_state_1, sample_state_2)

  def get_noised_result(self, sample_state: Nest,
                        global_state: Nest) -> Tuple[Nest, Nest, Nest]:
    return self._wrapped.get_noised_result(sample_state, global_state)

  def derive_metrics(self, global_state: Nest) -> Dict[str, Any]:
    return self._wrapped.derive_metrics(global_state)

  def supports_record_scales(self) -> bool:
    return self._wrapped.supports_record_scales()

  def record_scales(self, params: Nest, sq_norms: Nest) -> Tuple[Nest, Nest]:
    return self._wrapped.record_scales(params, sq_norms)

  def preprocessed_sum(self, scaled_sum: Nest, extra_sum: Nest) -> Nest:
    return self._wrapped.preprocessed_sum(scaled_sum, extra_sum)


def check_record_structure(template_like: Nest, record: Nest,
                           what: str = "record") -> None:
  """Raises a RecordStructureError naming the mismatch if ``record`` has the
  wrong nest."""
  try:
    tf.nest.assert_same_structure(template_like, record)
  except (ValueError, TypeError) as e:
    raise RecordStructureError(
        f"The {what} does not have the structure the query was built for. "
        f"Expected the structure of {tf.nest.map_structure(lambda _: '.', template_like)}; "
        f"got {tf.nest.map_structure(lambda _: '.', record)}. ({e})") from None


def zeros_like_template(template: Nest) -> Nest:
  """Zeros with the shapes and dtypes of a nest of tensors or TensorSpecs."""

  def zeros(t):
    if isinstance(t, tf.TensorSpec):
      return tf.zeros(t.shape, t.dtype)
    return tf.zeros_like(t)

  return tf.nest.map_structure(zeros, template)


class SumAggregationDPQuery(DPQuery):
  """Base class for queries whose sample state is a sum of records."""

  def initial_sample_state(self, template: Nest = None) -> Nest:
    return zeros_like_template(template)

  def accumulate_preprocessed_record(self, sample_state: Nest,
                                     preprocessed_record: Nest) -> Nest:
    check_record_structure(sample_state, preprocessed_record)
    return tf.nest.map_structure(
        lambda s, r: s + tf.cast(r, s.dtype), sample_state,
        preprocessed_record)

  def merge_sample_states(self, sample_state_1: Nest,
                          sample_state_2: Nest) -> Nest:
    check_record_structure(sample_state_1, sample_state_2, "sample state")
    return tf.nest.map_structure(tf.add, sample_state_1, sample_state_2)
