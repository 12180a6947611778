"""Joint clipping of a group of vectors on different scales (McMahan & Andrew, Sec. 2)."""

from typing import Optional, Tuple

import tensorflow as tf

from tf_dp.analysis import checks
from tf_dp.dp_query import gaussian_query
from tf_dp.dp_query import nest_utils
from tf_dp.dp_query.dp_query import Nest


class JointClippingQuery(gaussian_query.GaussianSumQuery):
  """Scale each vector by 1/alpha_j, clip the group jointly, noise, scale back.

  For a record ``(v_1, ..., v_k)`` and scales ``(alpha_1, ..., alpha_k)`` the
  query sums ``alpha_j * pi_S(s(v; alpha))_j`` and adds N(0, (alpha_j sigma)^2)
  to vector j, where ``s(v; alpha) = (v_1/alpha_1, ..., v_k/alpha_k)`` and
  ``pi_S`` clips to L2 norm S. If ``||v_j|| <= alpha_j`` for all j then the
  scaled record has norm <= sqrt(k), so S = sqrt(k) is a conservative default;
  when no clipping occurs the sum of the inputs is returned unchanged.

  Privacy contract: a post-processing of the Gaussian sum query with privacy
  tuple (S, sigma) in the scaled space, which is the event reported.

  Args:
    scales: A nest of positive floats, one per tensor of the record (or a
      prefix: one scale for each sub-structure).
    l2_norm_clip: Joint clip S in the scaled space, >= 0.
    stddev: Noise stddev sigma in the scaled space, >= 0.
    noise_seed: None for OS entropy (default).
  """

  def __init__(self, scales: Nest, l2_norm_clip: float, stddev: float,
               noise_seed: Optional[int] = None) -> None:
    super().__init__(l2_norm_clip, stddev, noise_seed)
    for i, a in enumerate(tf.nest.flatten(scales)):
      checks.check_positive(f"scales[{i}]", a)
    self._scales = scales

  def _apply_scales(self, record, fn):
    return nest_utils.map_structure_up_to(
        self._scales,
        lambda a, sub: tf.nest.map_structure(
            lambda x: fn(x, tf.cast(a, x.dtype)), sub),
        self._scales, record)

  def preprocess_record(self, params: Nest, record: Nest) -> Nest:
    scaled = self._apply_scales(record, lambda x, a: x / a)
    return super().preprocess_record(params, scaled)

  def get_noised_result(self, sample_state: Nest,
                        global_state: Nest) -> Tuple[Nest, Nest, Nest]:
    result, new_state, event = super().get_noised_result(sample_state,
                                                         global_state)
    return self._apply_scales(result, lambda x, a: x * a), new_state, event

  def record_scales(self, params: Nest, sq_norms: Nest) -> Tuple[Nest, Nest]:
    scaled_sq = self._apply_scales(sq_norms, lambda s, a: s / (a * a))
    joint, extra = super().record_scales(params, scaled_sq)
    return self._apply_scales(joint, lambda c, a: c / a), extra
