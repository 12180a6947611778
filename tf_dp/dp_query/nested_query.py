"""A structure of queries applied to the matching structure of a record."""

from typing import Any, Dict, Tuple

import tensorflow as tf

from tf_dp.dp_query import dp_query
from tf_dp.dp_query import nest_utils
from tf_dp.dp_query.dp_query import Nest
from tf_dp.errors import RecordStructureError


class NestedQuery(dp_query.DPQuery):
  """Applies each query of a nest to the matching part of every record.

  One sample, several groups (McMahan & Andrew 2018, Sec. 3): per-layer
  clipping and noise, or gradients plus metrics plus batch-norm statistics.
  The structure of ``queries`` must be a prefix of each record's structure;
  each query receives its own sub-structure.

  Privacy contract: each sub-query's contract holds for its group; the
  event is the tuple of the sub-queries' events (in ``tf.nest`` order), and
  the accountant composes them as one Gaussian query by eq. (1).

  Args:
    queries: A nest (list, tuple, dict, namedtuple) of ``DPQuery`` objects.
  """

  def __init__(self, queries: Nest) -> None:
    self._queries = queries
    if not tf.nest.flatten(queries):
      raise ValueError("queries must contain at least one DPQuery.")
    for q in tf.nest.flatten(queries):
      if not isinstance(q, dp_query.DPQuery):
        raise TypeError(f"queries must be a nest of DPQuery; found {q!r}.")

  @property
  def queries(self) -> Nest:
    return self._queries

  def _map(self, fn, *inputs):
    return nest_utils.map_structure_up_to(self._queries, fn, self._queries,
                                          *inputs)

  def _check(self, record, what="record"):
    try:
      nest_utils.flatten_up_to(self._queries, record, what)
    except ValueError as e:
      raise RecordStructureError(
          f"The {what} does not match the structure of the NestedQuery's "
          f"queries {tf.nest.map_structure(lambda _: '.', self._queries)}: "
          f"{e}") from None

  def initial_global_state(self) -> Nest:
    return self._map(lambda q: q.initial_global_state())

  def derive_sample_params(self, global_state: Nest) -> Nest:
    return self._map(lambda q, s: q.derive_sample_params(s), global_state)

  def initial_sample_state(self, template: Nest = None) -> Nest:
    self._check(template, "template")
    return self._map(lambda q, t: q.initial_sample_state(t), template)

  def preprocess_record(self, params: Nest, record: Nest) -> Nest:
    self._check(record)
    return self._map(lambda q, p, r: q.preprocess_record(p, r), params,
                     record)

  def accumulate_preprocessed_record(self, sample_state: Nest,
                                     preprocessed_record: Nest) -> Nest:
    self._check(preprocessed_record)
    return self._map(lambda q, s, r: q.accumulate_preprocessed_record(s, r),
                     sample_state, preprocessed_record)

  def merge_sample_states(self, sample_state_1: Nest,
                          sample_state_2: Nest) -> Nest:
    return self._map(lambda q, a, b: q.merge_sample_states(a, b),
                     sample_state_1, sample_state_2)

  def get_noised_result(self, sample_state: Nest,
                        global_state: Nest) -> Tuple[Nest, Nest, Nest]:
    triples = self._map(lambda q, s, g: q.get_noised_result(s, g),
                        sample_state, global_state)
    flat = nest_utils.flatten_up_to(self._queries, triples)
    result = tf.nest.pack_sequence_as(self._queries, [t[0] for t in flat])
    new_state = tf.nest.pack_sequence_as(self._queries, [t[1] for t in flat])
    return result, new_state, tuple(t[2] for t in flat)

  def derive_metrics(self, global_state: Nest) -> Dict[str, Any]:
    metrics = {}
    flat_q = tf.nest.flatten(self._queries)
    flat_s = nest_utils.flatten_up_to(self._queries, global_state)
    for i, (q, s) in enumerate(zip(flat_q, flat_s)):
      for name, value in q.derive_metrics(s).items():
        metrics[f"{name}/{i}" if len(flat_q) > 1 else name] = value
    return metrics

  def supports_record_scales(self) -> bool:
    return all(q.supports_record_scales()
               for q in tf.nest.flatten(self._queries))

  def record_scales(self, params: Nest, sq_norms: Nest) -> Tuple[Nest, Nest]:
    pairs = self._map(lambda q, p, s: q.record_scales(p, s), params, sq_norms)
    flat = nest_utils.flatten_up_to(self._queries, pairs)
    scales = tf.nest.pack_sequence_as(self._queries, [f[0] for f in flat])
    extra = tf.nest.pack_sequence_as(self._queries, [f[1] for f in flat])
    return scales, extra

  def preprocessed_sum(self, scaled_sum: Nest, extra_sum: Nest) -> Nest:
    return self._map(lambda q, s, e: q.preprocessed_sum(s, e), scaled_sum,
                     extra_sum)
