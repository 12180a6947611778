"""Adaptive clipping: track a quantile of the record norms privately.

Andrew, Thakkar, McMahan & Ramaswamy (2021), "Differentially private
learning with adaptive clipping". Each record contributes its clipped value
to a Gaussian sum query (clip C, stddev z*C) and the bit
``b = 1{||x|| <= C} - 1/2`` to a second Gaussian sum query (sensitivity 1/2,
stddev ``clipped_count_stddev``). The noised bits estimate the fraction of
unclipped records; the clip takes one step of the quantile estimator
(``quantile_estimator_query.updated_estimate``) towards the target:
geometric ``C <- C exp(-eta (f - gamma))`` (default) or arithmetic ``C <- C -
eta (f - gamma)``, floored at a tiny positive clip.

Privacy contract: two Gaussian sum queries on the same sample, both in the
event, so the ledger composes them by McMahan & Andrew's eq. (1): the
effective noise multiplier is ``(z^-2 + (2 * clipped_count_stddev)^-2)^-1/2``
(Andrew et al., Thm. 1).
"""

import collections
from typing import Any, Dict, Optional, Tuple

import tensorflow as tf

from tf_dp.analysis import checks
from tf_dp.dp_query import clipping
from tf_dp.dp_query import dp_query
from tf_dp.dp_query import events
from tf_dp.dp_query import noise
from tf_dp.dp_query import quantile_estimator_query as quantile_lib
from tf_dp.dp_query.dp_query import Nest

# The arithmetic update may not take the clip to 0 or below (a clip <= 0
# would make the recorded noise multiplier z * C / C undefined).
MIN_CLIP = 1e-12

AdaptiveClipState = collections.namedtuple(
    "AdaptiveClipState",
    ["l2_norm_clip", "noise_multiplier", "clipped_count_stddev",
     "noise_nonce"])
AdaptiveClipSample = collections.namedtuple("AdaptiveClipSample",
                                            ["sum", "unclipped_bits"])


class QuantileAdaptiveClipSumQuery(dp_query.DPQuery):
  """Gaussian sum query whose clip adapts to a target quantile of norms.

  Args:
    initial_l2_norm_clip: Starting clip C_0 > 0.
    noise_multiplier: z; the sum's noise stddev is z * C at every step.
      The ledger charges the effective multiplier of both sums, below z:
      for a target effective multiplier z_t take
      ``z = (z_t^-2 - (2 * clipped_count_stddev)^-2)^-1/2`` (which needs
      ``2 * clipped_count_stddev > z_t``; Andrew et al., Thm. 1).
    target_unclipped_quantile: gamma in [0, 1], e.g. 0.5 for the median.
    learning_rate: eta >= 0 (a float or a ``tf.Variable``; 0 keeps the clip
      fixed).
    clipped_count_stddev: Noise stddev on the sum of bits (sensitivity 1/2).
      Andrew et al. suggest expected_num_records / 20.
    expected_num_records: q * n, the public denominator of the fraction.
    geometric_update: Geometric (default) or arithmetic update of the clip.
    noise_seed: None for OS entropy (default).
    secure_mode: True for noise from the OS CSPRNG (see ``noise.py``).
  """

  def __init__(self, initial_l2_norm_clip: float, noise_multiplier: float,
               target_unclipped_quantile: float, learning_rate: float,
               clipped_count_stddev: float, expected_num_records: float,
               geometric_update: bool = True, noise_seed: Optional[int] = None,
               secure_mode: bool = False) -> None:
    self._clip = checks.check_positive("initial_l2_norm_clip",
                                       initial_l2_norm_clip)
    self._z = checks.check_non_negative("noise_multiplier", noise_multiplier)
    self._target = checks.check_probability("target_unclipped_quantile",
                                            target_unclipped_quantile)
    self._lr = quantile_lib.check_learning_rate(learning_rate)
    self._geometric = bool(geometric_update)
    self._count_stddev = checks.check_non_negative("clipped_count_stddev",
                                                   clipped_count_stddev)
    self._expected = checks.check_positive("expected_num_records",
                                           expected_num_records)
    self._noise = noise.NoiseGenerator(noise_seed, secure_mode)

  def initial_global_state(self) -> Nest:
    return AdaptiveClipState(
        tf.constant(self._clip), tf.constant(self._z),
        tf.constant(self._count_stddev),
        self._noise.initial_nonce())

  def derive_sample_params(self, global_state: Nest) -> Nest:
    return global_state.l2_norm_clip

  def initial_sample_state(self, template: Nest = None) -> Nest:
    return AdaptiveClipSample(dp_query.zeros_like_template(template),
                              tf.constant(0.0))

  def preprocess_record(self, params: Nest, record: Nest) -> Nest:
    clipped, norm = clipping.clip_by_global_l2_norm(record, params)
    return AdaptiveClipSample(clipped,
                              quantile_lib.below_estimate_bit(norm, params))

  def accumulate_preprocessed_record(self, sample_state: Nest,
                                     preprocessed_record: Nest) -> Nest:
    dp_query.check_record_structure(sample_state.sum, preprocessed_record.sum)
    return tf.nest.map_structure(lambda s, r: s + tf.cast(r, s.dtype),
                                 sample_state, preprocessed_record)

  def merge_sample_states(self, sample_state_1: Nest,
                          sample_state_2: Nest) -> Nest:
    return tf.nest.map_structure(tf.add, sample_state_1, sample_state_2)

  def get_noised_result(self, sample_state: Nest,
                        global_state: Nest) -> Tuple[Nest, Nest, Nest]:
    clip = global_state.l2_norm_clip
    stddev = global_state.noise_multiplier * clip
    nonce = global_state.noise_nonce
    noised_sum = self._noise.add(sample_state.sum, stddev, nonce, stream=0)
    noised_bits = self._noise.add(sample_state.unclipped_bits,
                                  global_state.clipped_count_stddev, nonce,
                                  stream=1)
    unclipped_fraction = noised_bits / self._expected + 0.5
    new_clip = tf.maximum(quantile_lib.updated_estimate(
        clip, unclipped_fraction, self._target, self._lr, self._geometric),
                          MIN_CLIP)
    new_state = global_state._replace(l2_norm_clip=new_clip,
                                      noise_nonce=self._noise.advance(nonce))
    event = (events.SumQueryEvent(clip, stddev),
             events.SumQueryEvent(tf.constant(0.5),
                                  global_state.clipped_count_stddev))
    return noised_sum, new_state, event

  def derive_metrics(self, global_state: Nest) -> Dict[str, Any]:
    return {"l2_norm_clip": global_state.l2_norm_clip}

  def supports_record_scales(self) -> bool:
    return True

  def record_scales(self, params: Nest, sq_norms: Nest) -> Tuple[Nest, Nest]:
    total = tf.add_n([tf.cast(s, tf.float32)
                      for s in tf.nest.flatten(sq_norms)])
    scale = clipping.scale_from_squared_norm(total, params)
    unclipped = quantile_lib.below_estimate_bit(tf.sqrt(total), params)
    return tf.nest.map_structure(lambda _: scale, sq_norms), unclipped

  def preprocessed_sum(self, scaled_sum: Nest, extra_sum: Nest) -> Nest:
    return AdaptiveClipSample(scaled_sum, extra_sum)
