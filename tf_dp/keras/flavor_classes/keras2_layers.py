"""``DPBatchNormalization`` for Keras 2 (tf-keras, or tf.keras on TF 2.15)."""

from tf_dp.keras import dp_batch_norm
from tf_dp.keras.backend import keras2_bases


@keras2_bases.register_layer
class DPBatchNormalization(dp_batch_norm.DPBatchNormalizationMixin,
                           keras2_bases.Layer):
  """Batch normalisation with DP statistics (Keras 2); see dp_batch_norm.

  Saved under the names it always had: ``"tf_dp>DPBatchNormalization"``
  (registered, so ``load_model`` finds it) where Keras 2 is the ``keras``
  package (TF 2.15); its class name with tf-keras next to Keras 3 (load
  with ``custom_objects={"DPBatchNormalization": DPBatchNormalization}``).

  Args:
    l2_norm_clip: Clip of one record's (mean, mean of squares) vector.
    noise_multiplier: Noise stddev / l2_norm_clip for the statistics.
    momentum: Moving-average momentum of the statistics, per lot.
    epsilon, center, scale: As in BatchNormalization.
  """

  # Its public home, which saved models record (Keras 2's loader imports
  # it).
  __module__ = "tf_dp.keras.layers_keras2"
