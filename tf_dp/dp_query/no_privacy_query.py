"""Non-private baselines. They must never look private to the accountant."""

import collections
import math
from typing import Tuple

import tensorflow as tf

from tf_dp.dp_query import dp_query
from tf_dp.dp_query import events
from tf_dp.dp_query.dp_query import Nest

NoPrivacyAverageState = collections.namedtuple("NoPrivacyAverageState",
                                               ["sum", "count"])


def non_private_event() -> events.SumQueryEvent:
  """The event of a release with no clipping and no noise."""
  # No clipping and no noise: noise multiplier 0, which every accountant
  # turns into epsilon = infinity.
  return events.SumQueryEvent(tf.constant(math.inf), tf.constant(0.0))


class NoPrivacySumQuery(dp_query.SumAggregationDPQuery):
  """Plain sum of the records. No clipping, no noise.

  Privacy contract: none. The event is a sum query with infinite clip and
  zero noise, so a ledger that recorded it reports epsilon = inf.
  """

  def get_noised_result(self, sample_state: Nest,
                        global_state: Nest) -> Tuple[Nest, Nest, Nest]:
    return sample_state, global_state, non_private_event()


class NoPrivacyAverageQuery(dp_query.DPQuery):
  """Plain average of the records (sum / count), for non-private baselines.

  Privacy contract: none (epsilon = inf if recorded in a ledger).
  """

  def initial_sample_state(self, template: Nest = None) -> Nest:
    return NoPrivacyAverageState(dp_query.zeros_like_template(template),
                                 tf.constant(0.0))

  def preprocess_record(self, params: Nest, record: Nest) -> Nest:
    # The count travels with the record, so sums of preprocessed records
    # (as the training engine forms them) keep the right count.
    return NoPrivacyAverageState(record, tf.constant(1.0))

  def accumulate_preprocessed_record(self, sample_state: Nest,
                                     preprocessed_record: Nest) -> Nest:
    if not isinstance(preprocessed_record, NoPrivacyAverageState):
      preprocessed_record = self.preprocess_record((), preprocessed_record)
    dp_query.check_record_structure(sample_state.sum, preprocessed_record.sum)
    total = tf.nest.map_structure(lambda s, r: s + tf.cast(r, s.dtype),
                                  sample_state.sum, preprocessed_record.sum)
    return NoPrivacyAverageState(
        total, sample_state.count + tf.cast(preprocessed_record.count,
                                            tf.float32))

  def supports_record_scales(self) -> bool:
    return True

  def record_scales(self, params: Nest, sq_norms: Nest) -> Tuple[Nest, Nest]:
    ones = tf.ones_like(tf.nest.flatten(sq_norms)[0])
    return tf.nest.map_structure(lambda _: ones, sq_norms), ones

  def preprocessed_sum(self, scaled_sum: Nest, extra_sum: Nest) -> Nest:
    return NoPrivacyAverageState(scaled_sum, extra_sum)

  def merge_sample_states(self, sample_state_1: Nest,
                          sample_state_2: Nest) -> Nest:
    return NoPrivacyAverageState(
        tf.nest.map_structure(tf.add, sample_state_1.sum, sample_state_2.sum),
        sample_state_1.count + sample_state_2.count)

  def get_noised_result(self, sample_state: Nest,
                        global_state: Nest) -> Tuple[Nest, Nest, Nest]:
    count = tf.maximum(sample_state.count, 1.0)
    result = tf.nest.map_structure(lambda s: s / tf.cast(count, s.dtype),
                                   sample_state.sum)
    return result, global_state, non_private_event()
