"""Deliberately broken mechanisms, to show that the audits can fail.

Each claims (in its event, hence in the ledger) the clip and noise of a
correct ``GaussianSumQuery`` but does not apply one of them. Never use these
for training.
"""

import tensorflow as tf

from tf_dp.dp_query import gaussian_query


class NoiseOffQuery(gaussian_query.GaussianSumQuery):
  """Claims N(0, stddev^2) noise but adds none."""

  def get_noised_result(self, sample_state, global_state):
    _, new_state, event = super().get_noised_result(sample_state,
                                                    global_state)
    return sample_state, new_state, event


class ClipOffQuery(gaussian_query.GaussianSumQuery):
  """Claims clipping to l2_norm_clip but never clips."""

  def preprocess_record(self, params, record):
    return record

  def record_scales(self, params, sq_norms):
    ones = tf.nest.map_structure(tf.ones_like, sq_norms)
    return ones, ()


