"""The Keras 2 adapter: ``tf_keras``, or ``keras`` 2.x (``tf.keras``) on TF 2.15.

Implements the adapter interface of ``tf_dp.keras.backend`` (see there). With
``keras2_layers`` and ``keras2_optimizer`` it is the only code of tf_dp that
imports Keras 2 or reads a Keras 2 private attribute. Keras is imported on
first use, so importing this module never needs Keras 2 installed.
"""

import functools
import importlib.util
import sys
import typing

import tensorflow as tf

from tf_dp.keras.backend import keras3

NAME = "keras2"

# Keras 2's ``fit(..., shuffle="batch")`` shuffles the batches' order too
# (blocks of B rows), besides the rows within each batch.
SHUFFLE_BATCH_KEEPS_BATCH_ORDER = False


def module() -> typing.Any:
  """The Keras 2 module: ``tf_keras`` if installed, else ``tf.keras`` when
  the installed ``keras`` is 2.x (TF 2.15); None if there is no Keras 2."""
  try:
    import tf_keras  # pylint: disable=g-import-not-at-top
    return tf_keras
  except ImportError:
    pass
  if keras3.module() is None:
    return tf.keras
  return None


@functools.lru_cache(maxsize=None)
def _tf_keras_installed() -> bool:
  try:
    return importlib.util.find_spec("tf_keras") is not None
  except (ImportError, ValueError):
    return False


def imported_module() -> typing.Any:
  """``module()`` if it is already imported, else None (never imports
  ``tf_keras``)."""
  tf_keras = sys.modules.get("tf_keras")
  if tf_keras is not None:
    return tf_keras
  if _tf_keras_installed() or "keras" not in sys.modules:
    return None
  return module()


def defines(cls: type) -> bool:
  """Whether the class ``cls`` is Keras 2's own (defined in ``tf_keras``,
  or in ``keras`` when that package is Keras 2)."""
  name = cls.__module__
  return name.startswith("tf_keras") or (
      name.startswith("keras") and keras3.module() is None)


# --- Models and layers. ---


def all_layers(model: typing.Any) -> typing.List[typing.Any]:
  """Every layer inside ``model``, recursively (not ``model`` itself)."""
  return list(model._flatten_layers(include_self=False, recursive=True))  # pylint: disable=protected-access


def sublayers(layer: typing.Any) -> typing.List[typing.Any]:
  """The layers ``layer`` owns directly (one level down)."""
  return list(layer._flatten_layers(include_self=False, recursive=False))  # pylint: disable=protected-access


def unpack_x_y_sample_weight(
    data: typing.Any) -> typing.Tuple[typing.Any, typing.Any, typing.Any]:
  """``(x, y, sample_weight)`` of one element of what ``fit`` iterates."""
  return module().utils.unpack_x_y_sample_weight(data)


def batch_norm_classes() -> typing.Tuple[type, ...]:
  """BatchNormalization, SyncBatchNormalization and their Keras bases named
  like them (for ``isinstance``: a subclass of any of them normalises with
  batch statistics, whatever its own name)."""
  layers = module().layers
  roots = [layers.BatchNormalization]
  sync = getattr(getattr(layers, "experimental", None),
                 "SyncBatchNormalization", None)
  if sync is not None:
    roots.append(sync)
  classes: typing.Set[type] = set()
  for root in roots:
    classes.update(c for c in root.__mro__
                   if "BatchNormalization" in c.__name__)
  return tuple(classes)


def pfor_hazard_layer_classes() -> typing.Tuple[type, ...]:
  """Layer classes that must not run under ``tf.vectorized_map``: none
  (Keras 2's EinsumDense and MultiHeadAttention train under it with oneDNN
  on, measured on TF 2.21)."""
  return ()


def make_randomness_per_example(layer: typing.Any) -> None:
  """Nothing to do: Keras 2's random layers draw with stateful TF ops,
  which give each example its own draw under ``tf.vectorized_map``."""
  del layer


# --- Losses. ---


def get_loss(identifier: typing.Any) -> typing.Any:
  """A Keras loss from its name (or the object itself)."""
  return module().losses.get(identifier)


def loss_container(model: typing.Any) -> typing.Any:
  """The compiled-loss container of ``model`` (``compile(loss=...)``), or
  None before ``compile``."""
  return getattr(model, "compiled_loss", None)


def build_loss_container(container: typing.Any, y_true: typing.Any,
                         y_pred: typing.Any) -> None:
  """Builds the container for these predictions, once."""
  del y_true
  if not getattr(container, "built", False):
    container.build(y_pred)


def batch_of_one_loss(
    container: typing.Any) -> typing.Callable[..., typing.Any]:
  """``f(y, y_pred, sample_weight) -> scalar``: the compiled loss of a batch.

  The per-output loop of ``LossesContainer.__call__``: structure conformed
  to the outputs, ranks and dtypes matched, masks applied to the weights,
  each output's loss object called with its reduction and multiplied by its
  loss weight; without the loss trackers and the per-replica scaling (the
  DP step sums clipped records across replicas itself).
  """
  # The container's own module (tf_keras, or keras 2.15 inside TF 2.15).
  compile_utils = sys.modules[type(container).__module__]
  losses_utils = compile_utils.losses_utils

  def loss(y_true: typing.Any, y_pred: typing.Any,
           sample_weight: typing.Any) -> tf.Tensor:
    y_true = container._conform_to_outputs(y_pred, y_true)  # pylint: disable=protected-access
    sample_weight = container._conform_to_outputs(y_pred, sample_weight)  # pylint: disable=protected-access
    values = []
    for y_t, y_p, sw, loss_obj, weight in zip(
        tf.nest.flatten(y_true), tf.nest.flatten(y_pred),
        tf.nest.flatten(sample_weight), container._losses,  # pylint: disable=protected-access
        container._loss_weights):  # pylint: disable=protected-access
      if y_t is None or loss_obj is None:
        continue
      y_t, y_p, sw = compile_utils.match_dtype_and_rank(y_t, y_p, sw)
      sw = losses_utils.apply_mask(y_p, sw, losses_utils.get_mask(y_p))
      value = tf.cast(loss_obj(y_t, y_p, sample_weight=sw), tf.float32)
      if weight is not None:
        value *= weight
      values.append(value)
    if not values:
      raise ValueError("The compiled loss gave no loss for any output.")
    return tf.add_n(values)

  return loss


def output_mask(tensor: typing.Any) -> typing.Any:
  """The Keras mask carried by a model output, or None."""
  return getattr(tensor, "_keras_mask", None)


def set_output_mask(tensor: typing.Any, mask: typing.Any) -> None:
  """Attaches ``mask`` to ``tensor`` as Keras's loss reads it."""
  tensor._keras_mask = mask  # pylint: disable=protected-access


def added_loss_terms(layer: typing.Any) -> typing.List[typing.Any]:
  """The ``add_loss`` terms of ``layer``'s most recent call (itself only)."""
  return list(getattr(layer, "_losses", []))


def weight_regularization_terms(model: typing.Any) -> typing.List[typing.Any]:
  """The weight regularisers' penalties (terms that read no data): Keras 2
  lists them in ``model.losses`` (the DP step asks for them only when the
  model adds no ``add_loss`` term; activity regularisers are refused)."""
  return list(model.losses)


def reported_loss(model: typing.Any, x: typing.Any, y: typing.Any,
                  y_pred: typing.Any, sample_weight: typing.Any,
                  penalty: typing.Optional[tf.Tensor]) -> typing.Any:
  """The batch loss Keras reports for a step, added to its loss tracker.

  ``penalty`` (or None) stands for ``model.losses``: the ``add_loss``
  terms evaluated on a public input by the DP step.
  """
  if penalty is not None:
    return model.compiled_loss(y, y_pred, sample_weight,
                               regularization_losses=[penalty])
  return model.compute_loss(x, y, y_pred, sample_weight)


# --- Optimizers, layers and callbacks. ---


def clone_model(model: typing.Any,
                clone_function: typing.Callable[[typing.Any], typing.Any],
                replaced: typing.Container[int]) -> typing.Any:
  """``clone_model`` with ``clone_function`` (Keras 2 calls a clone without
  the original call's ``mask``; ``replaced`` is not needed)."""
  del replaced
  return module().models.clone_model(model, clone_function=clone_function)


def group_normalization(**kwargs: typing.Any) -> typing.Any:
  """A new Keras 2 ``GroupNormalization``."""
  return module().layers.GroupNormalization(**kwargs)


def get_optimizer(identifier: typing.Any) -> typing.Any:
  """A Keras optimizer from its name (or the object itself)."""
  return module().optimizers.get(identifier)


class CallbackHooks:
  """What Keras 2's ``CallbackList`` asks of a callback beyond the public
  interface: whether it implements the per-batch hooks (it skips them,
  and the batch-level work around them, for callbacks that do not)."""

  # Set by subclasses that act on ``on_train_batch_*``.
  train_batch_hooks = False

  def _implements_train_batch_hooks(self) -> bool:
    return self.train_batch_hooks

  def _implements_test_batch_hooks(self) -> bool:
    return False

  def _implements_predict_batch_hooks(self) -> bool:
    return False


def prepare_fit_across_workers(model: typing.Any) -> None:
  """Nothing: Keras 2's ``fit`` trains under a strategy that spans several
  workers as it is."""
  del model


def logs_across_workers(logs: typing.Dict[str, typing.Any]
                        ) -> typing.Dict[str, typing.Any]:
  """``logs`` unchanged: Keras 2 reduces scalar logs across workers."""
  return logs
