"""Rules for normalisations with per-example statistics: LayerNormalization,
GroupNormalization (last-axis channels) and KerasHub's RMSNormalization. Their scale and offset
gradients are small ([C]), so per-record gradients are materialised:
``sum_positions g * x_hat`` and ``sum_positions g``.
"""

from typing import Any, List, Optional, Sequence

import tensorflow as tf

from tf_dp.keras.fast import linear
from tf_dp.keras.fast import rule_types
from tf_dp.keras.fast import taps as taps_lib


class _AffineNormRule:
  """Base: y = x_hat * gamma + beta, per channel of the last axis."""

  pre_activation = False

  def normalized(self, layer: Any, x: tf.Tensor) -> tf.Tensor:
    raise NotImplementedError

  def variables(self, layer: Any) -> List[Any]:
    out = []
    if layer.scale:
      out.append(layer.gamma)
    if layer.center:
      out.append(layer.beta)
    return out

  def prepare(self, layer: Any, tap: taps_lib.Tap, out_grad: tf.Tensor,
              records: linear.Records) -> rule_types.PerRecordGradients:
    x = tf.cast(tap.args[0], out_grad.dtype)
    if _last_axis(layer) not in (-1, x.shape.rank - 1):
      raise linear.FastPathUnavailable(
          f"layer {layer.name!r} normalises over axis {layer.axis}, not the "
          "last axis")
    g = linear.per_record(out_grad, records)
    per_record = []
    if layer.scale:
      x_hat = linear.per_record(self.normalized(layer, x), records)
      per_record.append(tf.reduce_sum(g * x_hat, 1))
    if layer.center:
      per_record.append(tf.reduce_sum(g, 1))
    return rule_types.PerRecordGradients(per_record)

  def prepare_calls(self, layer: Any, taps: Sequence[taps_lib.Tap],
                    out_grads: Sequence[Any],
                    records: linear.Records) -> rule_types.PerRecordGradients:
    """A shared layer: each record's gradients summed over the calls."""
    states = [self.prepare(layer, tap, grad, records)
              for tap, grad in zip(taps, out_grads)]
    return rule_types.PerRecordGradients([tf.add_n(list(parts)) for parts in zip(
        *(state.per_record for state in states))])

  def sq_norms(self, state: rule_types.PerRecordGradients) -> List[tf.Tensor]:
    return [linear.exact_sq_norms(p) for p in state.per_record]

  def clipped_sums(self, state: rule_types.PerRecordGradients,
                   scales: List[tf.Tensor],
                   keep: tf.Tensor) -> List[tf.Tensor]:
    return [tf.tensordot(s, linear.mask(p, keep), axes=[[0], [0]])
            for p, s in zip(state.per_record, scales)]


def _last_axis(layer: Any) -> Optional[int]:
  axis = layer.axis
  if not isinstance(axis, int):
    axis = axis[0] if len(axis) == 1 else None
  return axis


class LayerNormalizationRule(_AffineNormRule):
  """keras.layers.LayerNormalization over the last axis."""

  def supports(self, layer: Any) -> bool:
    return (_last_axis(layer) is not None
            and not getattr(layer, "rms_scaling", False)
            and (layer.scale or layer.center))

  def normalized(self, layer: Any, x: tf.Tensor) -> tf.Tensor:
    mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
    return (x - mean) * tf.math.rsqrt(var + layer.epsilon)


class GroupNormalizationRule(_AffineNormRule):
  """keras.layers.GroupNormalization with channels on the last axis."""

  def supports(self, layer: Any) -> bool:
    return _last_axis(layer) is not None and (layer.scale or layer.center)

  def normalized(self, layer: Any, x: tf.Tensor) -> tf.Tensor:
    shape = tf.shape(x)
    channels = x.shape[-1]
    grouped = tf.reshape(x, [shape[0], -1, layer.groups,
                             channels // layer.groups])
    mean, var = tf.nn.moments(grouped, axes=[1, 3], keepdims=True)
    x_hat = (grouped - mean) * tf.math.rsqrt(var + layer.epsilon)
    return tf.reshape(x_hat, shape)


class RMSNormalizationRule:
  """KerasHub's RMS normalisations (Gemma's and ``keras_hub.layers``'):
  ``y = x_hat * (c + scale)`` with ``x_hat = x / sqrt(mean(x^2) + eps)``
  over the last axis (``c`` is 1 for Gemma's, 0 for the other; the
  gradient of ``scale`` is ``sum_positions g * x_hat`` either way).
  ``eps`` is the layer's ``epsilon``, 1e-6 where it has none (the value
  ``keras_hub.layers.RMSNormalization`` uses)."""

  pre_activation = False

  def supports(self, layer: Any) -> bool:
    return True

  def variables(self, layer: Any) -> List[Any]:
    return [layer.scale]

  def prepare(self, layer: Any, tap: taps_lib.Tap, out_grad: Any,
              records: linear.Records) -> rule_types.PerRecordGradients:
    x = tf.cast(tap.args[0], tf.float32)
    mean_square = tf.reduce_mean(tf.square(x), -1, keepdims=True)
    x_hat = x * tf.math.rsqrt(mean_square + getattr(layer, "epsilon", 1e-6))
    g = linear.per_record(tf.cast(out_grad, tf.float32), records)
    return rule_types.PerRecordGradients([tf.reduce_sum(
        g * linear.per_record(x_hat, records), 1)])

  prepare_calls = _AffineNormRule.prepare_calls
  sq_norms = _AffineNormRule.sq_norms
  clipped_sums = _AffineNormRule.clipped_sums


def register_keras_hub(register: rule_types.Register,
                       keras_hub: Any) -> None:
  """Rules for KerasHub's own normalisation layers."""
  # pylint: disable=g-import-not-at-top
  from keras_hub.src.models.gemma import rms_normalization as gemma_rms
  # pylint: enable=g-import-not-at-top
  for cls in (keras_hub.layers.RMSNormalization, gemma_rms.RMSNormalization):
    register(cls, RMSNormalizationRule())


def register_all(register: rule_types.Register,
                 modules: Sequence[Any]) -> None:
  for keras in modules:
    register(keras.layers.LayerNormalization, LayerNormalizationRule())
    group_norm = getattr(keras.layers, "GroupNormalization", None)
    if group_norm is not None:
      register(group_norm, GroupNormalizationRule())
