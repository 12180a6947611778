"""DP training metrics: counts of examples, correct predictions and classes.

Each record (one example) contributes ``count = 1``, ``correct`` (1 if the
prediction's argmax equals the label) and a one-hot ``class_counts`` vector,
a vector of L2 norm at most sqrt(3) that is clipped to sqrt(3) for safety.
Noised sums give private counts; accuracy is their ratio (post-processing).
"""

import collections
import math
from typing import Optional, Tuple

import tensorflow as tf

from tf_dp.analysis import checks
from tf_dp.dp_query import dp_query
from tf_dp.dp_query import gaussian_query
from tf_dp.dp_query.dp_query import Nest

MetricsRecord = collections.namedtuple("MetricsRecord",
                                       ["count", "correct", "class_counts"])
METRICS_L2_BOUND = math.sqrt(3.0)


def metrics_record(label: tf.Tensor, prediction: tf.Tensor,
                   num_classes: int) -> tf.Tensor:
  """The record of one example from its integer label and its scores."""
  label = tf.cast(tf.reshape(label, []), tf.int32)
  predicted = tf.cast(tf.argmax(tf.reshape(prediction, [-1])), tf.int32)
  return MetricsRecord(tf.constant(1.0),
                       tf.cast(tf.equal(label, predicted), tf.float32),
                       tf.one_hot(label, num_classes, dtype=tf.float32))


class DPMetricsQuery(dp_query.SumAggregationDPQuery):
  """Private counts for training metrics (e.g. ``dp_accuracy``).

  Privacy contract: each example contributes a vector of norm <= sqrt(3);
  N(0, stddev^2) is added once to every count; event
  ``SumQueryEvent(sqrt(3), stddev)``. In a ``NestedQuery`` with the gradient
  query it lands in the same ledger sample.

  Records are ``MetricsRecord``s (see ``metrics_record``) or
  ``(label, prediction)`` pairs.

  ``noise_seed`` and ``secure_mode`` are those of ``GaussianSumQuery``.

  ``get_noised_result`` returns a dict with ``count``, ``correct``,
  ``class_counts`` (noised) and ``accuracy = correct / max(count, 1)``.
  """

  def __init__(self, num_classes: int, stddev: float,
               noise_seed: Optional[int] = None,
               secure_mode: bool = False) -> None:
    self._num_classes = checks.check_positive_int("num_classes", num_classes)
    self._sum_query = gaussian_query.GaussianSumQuery(
        METRICS_L2_BOUND, checks.check_non_negative("stddev", stddev),
        noise_seed, secure_mode)

  def initial_global_state(self) -> Nest:
    return self._sum_query.initial_global_state()

  def derive_sample_params(self, global_state: Nest) -> Nest:
    return self._sum_query.derive_sample_params(global_state)

  def initial_sample_state(self, template: Nest = None) -> Nest:
    del template
    return MetricsRecord(tf.constant(0.0), tf.constant(0.0),
                         tf.zeros([self._num_classes]))

  def preprocess_record(self, params: Nest, record: Nest) -> Nest:
    if not isinstance(record, MetricsRecord):
      label, prediction = record
      record = metrics_record(label, prediction, self._num_classes)
    return self._sum_query.preprocess_record(params, record)

  def get_noised_result(self, sample_state: Nest,
                        global_state: Nest) -> Tuple[Nest, Nest, Nest]:
    noised, new_state, event = self._sum_query.get_noised_result(
        sample_state, global_state)
    result = dict(noised._asdict())
    result["accuracy"] = noised.correct / tf.maximum(noised.count, 1.0)
    return result, new_state, event
