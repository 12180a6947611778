"""tf_dp's Keras layers (``tf_dp.keras.layers``).

``DPBatchNormalization`` (see ``tf_dp.keras.dp_batch_norm``) is the class of
the default Keras: Keras 3 where it is installed, else Keras 2 (TF 2.15).
The Keras 2 class, for tf-keras models next to Keras 3, is
``tf_dp.keras.layers_keras2.DPBatchNormalization``. Keras 3's and TF 2.15's
are registered as ``"tf_dp>DPBatchNormalization"``.
"""

from tf_dp.keras import backend
from tf_dp.keras import flavor_classes

DPBatchNormalization = flavor_classes.dp_batch_norm_class(backend.default())
