"""tf_dp's Keras 2 layers (tf-keras, or tf.keras on TF 2.15).

``DPBatchNormalization`` for Keras 2 models (see
``tf_dp.keras.dp_batch_norm``); ``tf_dp.keras.layers`` has the default
Keras's, which is this one where Keras 3 is not installed. Saved models
record this module for the Keras 2 class.
"""

from tf_dp.keras import backend
from tf_dp.keras import flavor_classes

DPBatchNormalization = flavor_classes.dp_batch_norm_class(
    backend.for_flavor("keras2"))
