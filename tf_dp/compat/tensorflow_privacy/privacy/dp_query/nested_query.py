"""TF Privacy's ``nested_query`` module: tf_dp's ``NestedQuery``.

Same arguments and results as tf_dp's ``NestedQuery`` (any queries over a
``tf.nest`` structure; the event is the tuple of the sub-queries' events),
with TF Privacy's metric names: ``derive_metrics`` names a sub-query's
metric ``<path>/<name>`` (``"key2/0/metric"``), or ``<name>`` for a single
query. ``NestedSumQuery`` also requires every sub-query to aggregate by
summing its records (``TypeError`` otherwise), as TF Privacy's did.
"""

import tensorflow as tf

from tf_dp.dp_query import dp_query
from tf_dp.dp_query import nest_utils
from tf_dp.dp_query import nested_query
from tf_dp.dp_query import no_privacy_query
from tf_dp.dp_query import normalized_query
from tf_dp.dp_query import quantile_adaptive_clip_query
from tf_dp.dp_query import quantile_estimator_query

# Queries whose sample state is a sum over the records.
_SUM_QUERIES = (dp_query.SumAggregationDPQuery, normalized_query.NormalizedQuery,
                no_privacy_query.NoPrivacyAverageQuery,
                quantile_estimator_query.QuantileEstimatorQuery,
                quantile_adaptive_clip_query.QuantileAdaptiveClipSumQuery,
                nested_query.NestedQuery)


def _path_names(structure, prefix=()):
  """The paths of ``structure``'s leaves in ``tf.nest`` order, as "a/0/b"
  (dict keys sorted, namedtuple fields by name, sequences by index)."""
  if isinstance(structure, dict):
    items = sorted(structure.items())
  elif isinstance(structure, tuple) and hasattr(structure, "_fields"):
    items = list(zip(structure._fields, structure))
  elif isinstance(structure, (list, tuple)):
    items = list(enumerate(structure))
  else:
    return ["/".join(str(p) for p in prefix)]
  return [path for key, value in items
          for path in _path_names(value, prefix + (key,))]


class NestedQuery(nested_query.NestedQuery):
  """``tf_dp.NestedQuery`` with TF Privacy's metric names.

  Privacy contract: that of ``tf_dp.NestedQuery``.
  """

  def derive_metrics(self, global_state):
    flat_q = tf.nest.flatten(self.queries)
    flat_s = nest_utils.flatten_up_to(self.queries, global_state)
    paths = _path_names(self.queries)
    metrics = {}
    for path, query, state in zip(paths, flat_q, flat_s):
      for name, value in query.derive_metrics(state).items():
        metrics[f"{path}/{name}" if path else name] = value
    return metrics


class NestedSumQuery(NestedQuery):
  """``NestedQuery`` of queries that sum their records (TF Privacy's).

  Privacy contract: that of ``tf_dp.NestedQuery``.

  Raises:
    TypeError: if a sub-query does not aggregate by summing.
  """

  def __init__(self, queries):
    super().__init__(queries)
    for query in tf.nest.flatten(queries):
      if not isinstance(query, _SUM_QUERIES):
        raise TypeError(
            f"NestedSumQuery needs queries that sum their records; "
            f"{type(query).__name__} does not (use NestedQuery).")
