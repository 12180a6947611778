"""TF Privacy's ``no_privacy_query`` module: tf_dp's non-private baselines.

Both report epsilon = infinity to the ledger (TF Privacy's reported a
``NonPrivateDpEvent``). ``NoPrivacyAverageQuery.accumulate_record`` takes
TF Privacy's optional ``weight``: the result is the weighted average.
"""

import tensorflow as tf

from tf_dp.dp_query import no_privacy_query
from tf_dp.dp_query.no_privacy_query import NoPrivacySumQuery  # pylint: disable=unused-import


class NoPrivacyAverageQuery(no_privacy_query.NoPrivacyAverageQuery):
  """Weighted average of the records; no clipping, no noise (epsilon = inf).

  ``accumulate_record(params, sample_state, record, weight=1)`` adds
  ``weight * record`` to the sum and ``weight`` to the count, as TF
  Privacy's did; see ``tf_dp.NoPrivacyAverageQuery`` for the rest.
  """

  def accumulate_record(self, params, sample_state, record, weight=1):
    del params
    weight = tf.cast(weight, tf.float32)
    weighted = tf.nest.map_structure(
        lambda r: tf.cast(weight, tf.as_dtype(r.dtype)) * r,
        tf.nest.map_structure(tf.convert_to_tensor, record))
    return self.accumulate_preprocessed_record(
        sample_state, no_privacy_query.NoPrivacyAverageState(weighted, weight))
