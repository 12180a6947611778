"""The Gaussian sum query: clip each record, sum, add Gaussian noise once."""

import collections
from typing import Any, Dict, Optional, Tuple

import tensorflow as tf

from tf_dp.analysis import checks
from tf_dp.dp_query import clipping
from tf_dp.dp_query import dp_query
from tf_dp.dp_query import events
from tf_dp.dp_query import noise
from tf_dp.dp_query.dp_query import Nest

# noise_nonce: public int64 [noise_seed or 0, draws]; the secret key of the
# noise is never part of the state (see noise.py).
GaussianSumState = collections.namedtuple(
    "GaussianSumState", ["l2_norm_clip", "stddev", "noise_nonce"])


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

  The noise's secret key is not in the state (which holds only a public
  nonce) and so is never checkpointed: it is a per-process key from OS
  entropy, and no draw repeats within a process even if an earlier state is
  restored (see ``noise.py``).

  Args:
    l2_norm_clip: Clip norm S >= 0.
    stddev: Noise standard deviation >= 0 (0 gives no privacy: epsilon=inf).
    noise_seed: None for OS entropy (default); an int only for tests.
    secure_mode: True to draw every noise bit from the OS CSPRNG with a
      floating-point hardened Gaussian sampler (see ``noise.py``; slower,
      refused under XLA).

  Example:
    >>> query = GaussianSumQuery(l2_norm_clip=1.0, stddev=1.1)
  """

  def __init__(self, l2_norm_clip: float, stddev: float,
               noise_seed: Optional[int] = None,
               secure_mode: bool = False) -> None:
    self._l2_norm_clip = checks.check_non_negative("l2_norm_clip",
                                                   l2_norm_clip)
    self._stddev = checks.check_non_negative(
        "stddev", stddev, " Use stddev = noise_multiplier * l2_norm_clip.")
    self._noise = noise.NoiseGenerator(noise_seed, secure_mode)

  @property
  def l2_norm_clip(self) -> float:
    return self._l2_norm_clip

  @property
  def stddev(self) -> float:
    return self._stddev

  @property
  def secure_mode(self) -> bool:
    return self._noise.secure_mode

  def initial_global_state(self) -> Nest:
    return GaussianSumState(
        tf.constant(self._l2_norm_clip, tf.float32),
        tf.constant(self._stddev, tf.float32),
        self._noise.initial_nonce())

  def derive_sample_params(self, global_state: Nest) -> Nest:
    return global_state.l2_norm_clip

  def preprocess_record(self, params: Nest, record: Nest) -> Nest:
    clipped, _ = clipping.clip_by_global_l2_norm(record, params)
    return clipped

  def get_noised_result(self, sample_state: Nest,
                        global_state: Nest) -> Tuple[Nest, Nest, Nest]:
    result = self._noise.add(sample_state, global_state.stddev,
                             global_state.noise_nonce)
    new_state = global_state._replace(
        noise_nonce=self._noise.advance(global_state.noise_nonce))
    event = events.SumQueryEvent(global_state.l2_norm_clip,
                                 global_state.stddev)
    return result, new_state, event

  def derive_metrics(self, global_state: Nest) -> Dict[str, Any]:
    return {"l2_norm_clip": global_state.l2_norm_clip}

  def supports_record_scales(self) -> bool:
    return True

  def record_scales(self, params: Nest, sq_norms: Nest) -> Tuple[Nest, Nest]:
    scale = clipping.scale_from_squared_norm(
        tf.add_n([tf.cast(s, tf.float32) for s in tf.nest.flatten(sq_norms)]),
        params)
    return tf.nest.map_structure(lambda _: scale, sq_norms), ()

  def preprocessed_sum(self, scaled_sum: Nest, extra_sum: Nest) -> Nest:
    del extra_sum
    return scaled_sum
