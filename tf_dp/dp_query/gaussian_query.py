"""The Gaussian sum query: clip each record, sum, add Gaussian noise once."""

import collections

import tensorflow as tf

from tf_dp.dp_query import _checks
from tf_dp.dp_query import clipping
from tf_dp.dp_query import dp_query
from tf_dp.dp_query import events
from tf_dp.dp_query import noise

GaussianSumState = collections.namedtuple(
    "GaussianSumState", ["l2_norm_clip", "stddev", "noise_seed"])


class GaussianSumQuery(dp_query.SumAggregationDPQuery):
  """Sum of records clipped to L2 norm ``l2_norm_clip``, plus N(0, stddev^2 I).

  Privacy contract: each record (a nest of tensors, clipped as one vector)
  contributes at most ``l2_norm_clip`` in L2 norm; a record with a NaN or inf
  contributes zeros. ``get_noised_result`` adds independent N(0, stddev^2)
  noise to every coordinate of the sum, once per sample, and returns
  ``SumQueryEvent(l2_norm_clip, stddev)``. Its privacy cost is that of the
  Gaussian mechanism with noise multiplier ``stddev / l2_norm_clip``.

  The clip and stddev live in the global state, so a schedule may change
  them between samples (Abadi et al.'s time-dependent C and sigma); the
  event always reports the values actually used.

  Args:
    l2_norm_clip: Clip norm S >= 0.
    stddev: Noise standard deviation >= 0 (0 gives no privacy: epsilon=inf).
    noise_seed: None for OS entropy (default); an int only for tests.

  Example:
    >>> query = GaussianSumQuery(l2_norm_clip=1.0, stddev=1.1)
  """

  def __init__(self, l2_norm_clip, stddev, noise_seed=None):
    self._l2_norm_clip = _checks.non_negative("l2_norm_clip", l2_norm_clip)
    self._stddev = _checks.non_negative(
        "stddev", stddev, " Use stddev = noise_multiplier * l2_norm_clip.")
    self._noise_seed = noise_seed

  @property
  def l2_norm_clip(self):
    return self._l2_norm_clip

  @property
  def stddev(self):
    return self._stddev

  def initial_global_state(self):
    return GaussianSumState(
        tf.constant(self._l2_norm_clip, tf.float32),
        tf.constant(self._stddev, tf.float32),
        noise.new_noise_seed(self._noise_seed))

  def derive_sample_params(self, global_state):
    return global_state.l2_norm_clip

  def preprocess_record(self, params, record):
    clipped, _ = clipping.clip_by_global_l2_norm(record, params)
    return clipped

  def get_noised_result(self, sample_state, global_state):
    result = noise.add_gaussian_noise(sample_state, global_state.stddev,
                                      global_state.noise_seed)
    new_state = global_state._replace(
        noise_seed=noise.advance(global_state.noise_seed))
    event = events.SumQueryEvent(global_state.l2_norm_clip,
                                 global_state.stddev)
    return result, new_state, event

  def derive_metrics(self, global_state):
    return {"l2_norm_clip": global_state.l2_norm_clip}

  def supports_record_scales(self):
    return True

  def record_scales(self, params, sq_norms):
    scale = clipping.scale_from_squared_norm(
        tf.add_n([tf.cast(s, tf.float32) for s in tf.nest.flatten(sq_norms)]),
        params)
    return tf.nest.map_structure(lambda _: scale, sq_norms), ()

  def preprocessed_sum(self, scaled_sum, extra_sum):
    del extra_sum
    return scaled_sum
