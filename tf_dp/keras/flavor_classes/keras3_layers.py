"""``DPBatchNormalization`` for Keras 3 (``tf_dp.keras.layers``)."""

from tf_dp.keras import dp_batch_norm
from tf_dp.keras.backend import keras3_bases


@keras3_bases.register_layer
class DPBatchNormalization(dp_batch_norm.DPBatchNormalizationMixin,
                           keras3_bases.Layer):
  """Batch normalisation with DP statistics (Keras 3); see dp_batch_norm.

  Registered as ``"tf_dp>DPBatchNormalization"``, so
  ``keras.models.load_model`` finds it without ``custom_objects``.

  Args:
    l2_norm_clip: Clip of one record's (mean, mean of squares) vector.
    noise_multiplier: Noise stddev / l2_norm_clip for the statistics.
    momentum: Moving-average momentum of the statistics, per lot.
    epsilon, center, scale: As in keras.layers.BatchNormalization.
  """

  # Its public home, which saved models record.
  __module__ = "tf_dp.keras.layers"
