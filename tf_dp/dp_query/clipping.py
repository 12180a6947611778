"""L2 clipping of nested records, robust to overflow and non-finite values.

``clip_by_global_l2_norm`` scales a whole record (a nest of tensors) by
``min(1, C / ||record||)``. Two guards make the bound hold for any input:

* the norm is computed as ``m * sqrt(sum (x / m)^2)`` with ``m = max |x|``,
  so large but finite records are clipped, never turned into inf/NaN;
* a record containing NaN or inf is replaced by zeros (norm 0 <= C), so it
  cannot poison the sum. It still counts as a sampled record (it contributes
  nothing), and the query's sensitivity is unchanged.
"""

from typing import Tuple

import tensorflow as tf

from tf_dp.dp_query.dp_query import Nest


def global_l2_norm(record: Nest) -> tf.Tensor:
  """Overflow-safe L2 norm of all leaves of ``record`` (float32 or wider)."""
  leaves = [tf.convert_to_tensor(x) for x in tf.nest.flatten(record)]
  if not leaves:
    return tf.constant(0.0)
  dtype = tf.float64 if any(x.dtype == tf.float64 for x in leaves) else (
      tf.float32)
  leaves = [tf.cast(x, dtype) for x in leaves]
  max_abs = tf.reduce_max(tf.stack(
      [tf.reduce_max(tf.abs(x)) if x.shape.num_elements() != 0
       else tf.zeros([], dtype) for x in leaves]))
  safe = tf.where(max_abs > 0, max_abs, tf.ones([], dtype))
  sum_sq = tf.add_n([tf.reduce_sum(tf.square(x / safe)) for x in leaves])
  return safe * tf.sqrt(sum_sq) * tf.cast(max_abs > 0, dtype)


def scale_from_squared_norm(sq_norm: tf.Tensor,
                            l2_norm_clip: tf.Tensor) -> tf.Tensor:
  """The factor ``clip_by_global_l2_norm`` applies, from squared norms.

  ``min(1, C / norm)``, and 0 where the norm is not finite.
  """
  norm = tf.sqrt(tf.maximum(sq_norm, 0.0))
  clip = tf.cast(l2_norm_clip, norm.dtype)
  scale = tf.where(norm > clip, clip / tf.where(norm > 0, norm, 1.0), 1.0)
  return tf.where(tf.math.is_finite(norm), scale, tf.zeros_like(scale))


def clip_by_global_l2_norm(record: Nest,
                           l2_norm_clip: tf.Tensor) -> Tuple[Nest, tf.Tensor]:
  """Clips ``record`` to L2 norm ``l2_norm_clip``; zeros it if non-finite.

  Returns:
    ``(clipped_record, norm)``; ``norm`` is the record's norm before
    clipping (inf or NaN for a non-finite record).
  """
  norm = global_l2_norm(record)
  finite = tf.math.is_finite(norm)
  clip = tf.cast(l2_norm_clip, norm.dtype)
  scale = tf.where(finite & (norm > clip),
                   clip / tf.where(norm > 0, norm, tf.ones_like(norm)),
                   tf.ones_like(norm))

  def apply(x):
    x = tf.convert_to_tensor(x)
    scaled = x * tf.cast(scale, x.dtype)
    return tf.where(finite, scaled, tf.zeros_like(x))

  return tf.nest.map_structure(apply, record), norm
