"""tf_dp's classes of each Keras flavour (``tf_dp.keras.flavor_classes``):
the DP optimizer and ``DPBatchNormalization``, found by flavour."""

import importlib

import pytest

from tf_dp.keras import backend
from tf_dp.keras import flavor_classes
from tests.keras import helpers

KERAS = helpers.keras_modules()


def _adapter(K):
  return backend.keras3 if K is backend.keras3_module() else backend.keras2


def _registered_name(K, cls):
  saving = getattr(K, "saving", None)
  get = getattr(saving, "get_registered_name", None) or (
      K.utils.get_registered_name)
  return get(cls)


@pytest.mark.parametrize("K", KERAS)
def test_dp_classes_keep_their_saved_names(K):
  """The names saved models hold (registered name, and the module Keras 2's
  loader imports): the module gives the class."""
  adapter = _adapter(K)
  suffix = "3" if adapter is backend.keras3 else "2"
  layer_class = flavor_classes.dp_batch_norm_class(adapter)
  optimizer_class = flavor_classes.dp_optimizer_class(adapter)
  assert issubclass(layer_class, K.layers.Layer)
  assert issubclass(optimizer_class, K.optimizers.Optimizer)
  # tf-keras saves the Keras 2 layer under its class name, TF 2.15's Keras
  # under the registered name (as before one class served each flavour).
  layer_name = "tf_dp>DPBatchNormalization"
  if K.__name__.startswith("tf_keras"):
    layer_name = "DPBatchNormalization"
  saved = [(layer_class, layer_name,
            "tf_dp.keras.layers" if suffix == "3" else
            "tf_dp.keras.layers_keras2"),
           (optimizer_class, f"tf_dp>DPOptimizerKeras{suffix}",
            f"tf_dp.keras.flavor_classes.keras{suffix}_optimizer")]
  for cls, registered, module in saved:
    assert _registered_name(K, cls) == registered
    assert cls.__module__ == module
    assert getattr(importlib.import_module(module), cls.__name__) is cls
