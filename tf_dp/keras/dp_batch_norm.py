"""Batch normalisation with differentially private statistics.

``DPBatchNormalization`` normalises with its moving mean and variance in
training as well as in inference, so one example's output never depends on
the other examples of the batch (per-example clipping stays valid). The
moving statistics are updated once per lot from DP estimates: each record
contributes the per-feature mean of its activations and of their squares,
clipped jointly to ``l2_norm_clip``, and Gaussian noise of stddev
``noise_multiplier * l2_norm_clip`` is added to the sums
(``tf_dp.dp_query.BatchNormStatsQuery``). That sum query lands in the same
ledger sample as the gradients, so its privacy cost is accounted (eq. (1)).
The update is done by the model's ``DPOptimizer``; it needs the fast
clipping path (``per_example_method="auto"`` or ``"fast"``).
"""

from typing import TYPE_CHECKING, Any, Dict

import tensorflow as tf

from tf_dp.analysis import checks

# The flavour's keras.layers.Layer, which each flavour's class adds as the
# next base (``tf_dp.keras.backend``): unknown to the type checker.
_LayerBase: Any = Any if TYPE_CHECKING else object


class DPBatchNormalizationMixin(_LayerBase):
  """Flavour-independent body of ``DPBatchNormalization`` (its arguments:
  see the flavour's class)."""

  def __init__(self, l2_norm_clip: float = 1.0, noise_multiplier: float = 1.0,
               momentum: float = 0.9, epsilon: float = 1e-3,
               center: bool = True, scale: bool = True, **kwargs: Any) -> None:
    super().__init__(**kwargs)  # The flavour's keras.layers.Layer.
    self.l2_norm_clip = checks.check_positive("l2_norm_clip", l2_norm_clip)
    self.noise_multiplier = checks.check_non_negative("noise_multiplier",
                                                      noise_multiplier)
    self.momentum = checks.check_real("momentum", momentum, low=0.0,
                                      high=1.0, high_open=True)
    if not (center or scale):
      raise ValueError("DPBatchNormalization needs center or scale: the "
                       "statistics update is driven by its trainable "
                       "variables' taps.")
    self.epsilon = float(epsilon)
    self.center = center
    self.scale = scale

  def build(self, input_shape: Any) -> None:
    features = int(input_shape[-1])
    self.gamma = self.add_weight(name="gamma", shape=(features,),
                                 initializer="ones", trainable=True) if (
                                     self.scale) else None
    self.beta = self.add_weight(name="beta", shape=(features,),
                                initializer="zeros", trainable=True) if (
                                    self.center) else None
    self.moving_mean = self.add_weight(name="moving_mean", shape=(features,),
                                       initializer="zeros", trainable=False)
    self.moving_variance = self.add_weight(
        name="moving_variance", shape=(features,), initializer="ones",
        trainable=False)
    self.built = True

  def call(self, inputs: Any, training: Any = None) -> tf.Tensor:
    del training  # Same computation in training: no batch statistics.
    x = tf.convert_to_tensor(inputs)
    out = (x - tf.cast(self.moving_mean, x.dtype)) * tf.math.rsqrt(
        tf.cast(self.moving_variance, x.dtype) + self.epsilon)
    if self.gamma is not None:
      out = out * tf.cast(self.gamma, x.dtype)
    if self.beta is not None:
      out = out + tf.cast(self.beta, x.dtype)
    return out

  def update_statistics(self, mean: tf.Tensor,
                        variance: tf.Tensor) -> tf.Operation:
    """Moves the statistics towards DP estimates (called by the engine)."""
    m = self.momentum
    return tf.group(
        self.moving_mean.assign(m * self.moving_mean + (1 - m) * mean),
        self.moving_variance.assign(m * self.moving_variance
                                    + (1 - m) * variance))

  def get_config(self) -> Dict[str, Any]:
    config = super().get_config()
    config.update(l2_norm_clip=self.l2_norm_clip,
                  noise_multiplier=self.noise_multiplier,
                  momentum=self.momentum, epsilon=self.epsilon,
                  center=self.center, scale=self.scale)
    return config


def is_dp_batch_norm(layer: Any) -> bool:
  return isinstance(layer, DPBatchNormalizationMixin)
