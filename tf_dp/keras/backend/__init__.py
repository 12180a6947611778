"""One adapter per Keras flavour: the only code that tells Keras 3 from Keras 2.

tf_dp trains models of two Keras flavours:

* ``"keras3"``: the ``keras`` package >= 3 (what ``tf.keras`` is on
  TF >= 2.16);
* ``"keras2"``: ``tf_keras``, or ``keras`` 2.x (``tf.keras``) on TF 2.15.

What differs between them, and every use of a Keras private API, lives in
this package: the adapters ``keras3.py`` and ``keras2.py``, the Keras side
of tf_dp's classes that subclass a flavour's own (``keras3_bases.py`` /
``keras2_bases.py``: the optimizer that wraps another, the layer base,
registration under tf_dp's saved names; the DP classes built on them are in
``tf_dp.keras.flavor_classes``, above), and the callback base that serves
both flavours (``callback.py``). The rest of tf_dp asks the adapter of an
object (``for_object(model)``) and never branches on a flavour, so a Keras
release that changes a private API breaks one file.
``tests/keras/backend/test_boundary.py`` enforces this. Nothing here imports
the rest of tf_dp.keras (``tests/test_layering.py``).

Nothing here imports a Keras package at module load: an adapter imports its
Keras on first use (the bases, when a class built on them is first used), so
tf_dp imports with either flavour alone.

The adapter interface (module-level names of ``keras3`` and ``keras2``)::

  NAME                          "keras3" or "keras2"
  SHUFFLE_BATCH_KEEPS_BATCH_ORDER  whether fit(..., shuffle="batch") takes
                                the batches in their order every epoch
  module()                      the flavour's Keras module, or None
  imported_module()             module() if already imported, else None
  defines(cls)                  whether a class is the flavour's own
  all_layers(model)             every layer inside a model, recursively
  sublayers(layer)              a layer's direct sublayers
  unpack_x_y_sample_weight(data)
  batch_norm_classes()          classes that normalise with batch statistics
  pfor_hazard_layer_classes()   layers TF's oneDNN breaks under vectorized_map
  make_randomness_per_example(layer)  independent draws per example, or raise
  get_loss(identifier), get_optimizer(identifier)
  clone_model(model, clone_function, replaced)  a clone, nested models too
  group_normalization(**kwargs)  a new GroupNormalization layer
  loss_container(model)         the compiled-loss container (None before
                                compile)
  build_loss_container(container, y_true, y_pred)
  batch_of_one_loss(container)  f(y, y_pred, w) -> the compiled loss of a
                                batch, without trackers or replica scaling
  output_mask(t), set_output_mask(t, mask)
  added_loss_terms(layer)       a layer's own add_loss terms of its last call
  weight_regularization_terms(model)
  reported_loss(model, x, y, y_pred, sample_weight, penalty)
                                the step's reported loss, tracked
  CallbackHooks                 a callback's private hooks for the flavour
  prepare_fit_across_workers(model)  lets fit train under a strategy that
                                spans several workers
  logs_across_workers(logs)     a train step's logs as fit reduces them
                                across workers
"""

import types
from typing import Any, List

from tf_dp.keras.backend import keras2
from tf_dp.keras.backend import keras3

_ADAPTERS = {keras3.NAME: keras3, keras2.NAME: keras2}
FLAVORS = tuple(_ADAPTERS)


def keras3_module() -> Any:
  """The Keras 3 module, or None if the installed ``keras`` is Keras 2."""
  return keras3.module()


def keras2_module() -> Any:
  """The Keras 2 module: ``tf_keras`` if installed, else ``tf.keras`` when
  ``keras`` is 2.x (TF 2.15); None if there is no Keras 2."""
  return keras2.module()


def installed() -> List[types.ModuleType]:
  """The adapters of the installed flavours, Keras 3 first."""
  return [a for a in (keras3, keras2) if a.module() is not None]


def imported() -> List[types.ModuleType]:
  """The adapters of the flavours whose Keras is already imported, Keras 3
  first. Never imports one: a model, layer or optimizer of a flavour exists
  only once that flavour is imported (importing ``tf_keras`` beside Keras 3
  would cost a Keras 3 user's process about 15 MiB for nothing)."""
  return [a for a in (keras3, keras2) if a.imported_module() is not None]


def for_flavor(name: str) -> types.ModuleType:
  """The adapter of flavour ``name`` (``"keras3"`` or ``"keras2"``).

  Raises:
    ValueError: for another name.
    ImportError: if that flavour is not installed.
  """
  adapter = _ADAPTERS.get(name)
  if adapter is None:
    raise ValueError(f"flavor must be one of {FLAVORS}; got {name!r}.")
  if adapter.module() is None:
    raise ImportError(f"No {name} installation found.")
  return adapter


def for_object(obj: Any) -> types.ModuleType:
  """The adapter of the flavour of a Keras model, layer or optimizer: the
  first class in its MRO that a flavour defines decides.

  Raises:
    TypeError: if ``obj`` is not a Keras object.
  """
  for cls in type(obj).__mro__:
    for adapter in (keras2, keras3):
      if adapter.defines(cls):
        return adapter
  raise TypeError(f"{obj!r} is not a Keras object.")


def default() -> types.ModuleType:
  """The adapter of ``keras`` where it is Keras 3, else of Keras 2: the
  flavour used when nothing else decides (an optimizer given by name)."""
  return keras3 if keras3.module() is not None else for_flavor(keras2.NAME)


def flavor_of(obj: Any) -> str:
  """``"keras3"`` or ``"keras2"`` for a Keras model, layer or optimizer."""
  return for_object(obj).NAME


def module_for(flavor: str) -> Any:
  """The Keras module of flavour ``flavor``.

  Raises:
    ImportError: if that flavour is not installed.
  """
  return for_flavor(flavor).module()
