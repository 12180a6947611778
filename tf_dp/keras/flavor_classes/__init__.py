"""tf_dp's Keras classes of each flavour: the DP optimizer
(``keras3_optimizer``, ``keras2_optimizer``) and ``DPBatchNormalization``
(``keras3_layers``, ``keras2_layers``). ``import tf_dp.keras`` imports the
Keras 3 ones (``register_saved_classes``), whose loader finds classes by
their registered names only; the others are imported on first use.

They stand above the Keras adapters (``tf_dp.keras.backend``): they
subclass the bases an adapter serves (``keras3_bases``, ``keras2_bases``,
which hold every Keras private API they need) and build on tf_dp's engine
(``dp_engine``, ``optimizer_base``, ``dp_batch_norm``).
"""

import types
from typing import Tuple

from tf_dp.keras.backend import keras3


def _classes(adapter: types.ModuleType) -> Tuple[type, type]:
  """``(DP optimizer class, DPBatchNormalization)`` of ``adapter``'s
  flavour, imported on first use."""
  # pylint: disable=g-import-not-at-top
  if adapter is keras3:
    from tf_dp.keras.flavor_classes import keras3_layers
    from tf_dp.keras.flavor_classes import keras3_optimizer
    return (keras3_optimizer.DPOptimizerKeras3,
            keras3_layers.DPBatchNormalization)
  from tf_dp.keras.flavor_classes import keras2_layers
  from tf_dp.keras.flavor_classes import keras2_optimizer
  return (keras2_optimizer.DPOptimizerKeras2,
          keras2_layers.DPBatchNormalization)


def dp_optimizer_class(adapter: types.ModuleType) -> type:
  """The class of ``tf_dp.DPOptimizer`` for the flavour of ``adapter``:
  ``DPOptimizerKeras3`` (registered as ``"tf_dp>DPOptimizerKeras3"``) or
  ``DPOptimizerKeras2`` (``"tf_dp>DPOptimizerKeras2"``)."""
  return _classes(adapter)[0]


def dp_batch_norm_class(adapter: types.ModuleType) -> type:
  """``DPBatchNormalization`` for the flavour of ``adapter`` (registered as
  ``"tf_dp>DPBatchNormalization"`` in that flavour's Keras)."""
  return _classes(adapter)[1]


def register_saved_classes() -> None:
  """Imports tf_dp's Keras 3 classes if Keras 3 is installed.

  Keras 3's loader finds a class only by its registered name
  (``"tf_dp>DPOptimizerKeras3"``, ``"tf_dp>DPBatchNormalization"``), which
  importing the class registers; without this, ``load_model`` in a fresh
  process could not find them. Keras 2's loaders import the module a file
  records (``tf_dp.keras.flavor_classes.keras2_optimizer``,
  ``tf_dp.keras.layers_keras2``), so its classes stay imported on first use,
  and no Keras 2 package is imported here.
  """
  if keras3.module() is not None:
    dp_optimizer_class(keras3)
    dp_batch_norm_class(keras3)
