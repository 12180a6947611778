"""Keras 2 layers of tf_dp (tf-keras, or tf.keras on TF 2.15)."""

from tf_dp.keras import compat
from tf_dp.keras import dp_batch_norm

_keras = compat.keras2()


class DPBatchNormalization(dp_batch_norm.DPBatchNormalizationMixin,
                           _keras.layers.Layer):
  """Batch normalisation with DP statistics (Keras 2); see dp_batch_norm."""

  def __init__(self, l2_norm_clip=1.0, noise_multiplier=1.0, momentum=0.9,
               epsilon=1e-3, center=True, scale=True, **kwargs):
    super().__init__(**kwargs)
    self._dp_bn_init(l2_norm_clip, noise_multiplier, momentum, epsilon,
                     center, scale)
