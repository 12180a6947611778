"""The Keras 3 adapter: ``keras`` >= 3 (what ``tf.keras`` is on TF >= 2.16).

Implements the adapter interface of ``tf_dp.keras.backend`` (see there). With
``keras3_layers`` and ``keras3_optimizer`` it is the only code of tf_dp that
imports Keras 3 or reads a Keras 3 private attribute. Keras is imported on
first use, so importing this module never needs Keras 3 installed.
"""

import sys
import types
import typing

import tensorflow as tf

from tf_dp import errors

NAME = "keras3"

# Keras 3's ``fit(..., shuffle="batch")`` takes batch i (rows ``i*B ..
# (i+1)*B - 1``) at step i of every epoch and shuffles only within it.
SHUFFLE_BATCH_KEEPS_BATCH_ORDER = True


def module() -> typing.Any:
  """The Keras 3 module, or None if ``keras`` is missing or is Keras 2."""
  try:
    import keras  # pylint: disable=g-import-not-at-top
  except ImportError:
    return None
  return keras if str(getattr(keras, "__version__", "2")).startswith("3") else (
      None)


def imported_module() -> typing.Any:
  """``module()`` if Keras 3 is already imported, else None (never
  imports it)."""
  return module() if "keras" in sys.modules else None


def defines(cls: type) -> bool:
  """Whether the class ``cls`` is Keras 3's own (defined in ``keras``)."""
  return cls.__module__.startswith("keras") and module() is not None


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
  """BatchNormalization and its Keras bases named like it (for
  ``isinstance``: a subclass of any of them normalises with batch
  statistics, whatever its own name)."""
  root = module().layers.BatchNormalization
  return tuple(c for c in root.__mro__ if "BatchNormalization" in c.__name__)


def pfor_hazard_layer_classes() -> typing.Tuple[type, ...]:
  """Layer classes whose computation TensorFlow >= 2.16's oneDNN kernels
  corrupt under ``tf.vectorized_map``: EinsumDense and MultiHeadAttention
  build a rank-4 x rank-2 matmul there (tensorflow#117700)."""
  layers = module().layers
  return (layers.EinsumDense, layers.MultiHeadAttention)


# --- Randomness: one independent draw per example. ---


def _per_example_dropout(layer: typing.Any) -> typing.Callable[..., typing.Any]:
  def call(inputs: typing.Any, training: typing.Any = False) -> typing.Any:
    if not training or layer.rate == 0:
      return inputs
    shape = None
    if hasattr(layer, "_get_noise_shape"):
      shape = layer._get_noise_shape(inputs)  # pylint: disable=protected-access
    if shape is not None:
      shape = [tf.shape(inputs)[i] if d is None else d
               for i, d in enumerate(shape)]
    return tf.nn.dropout(inputs, rate=layer.rate, noise_shape=shape)
  return call


def _per_example_gaussian_noise(
    layer: typing.Any) -> typing.Callable[..., typing.Any]:
  def call(inputs: typing.Any, training: typing.Any = False) -> typing.Any:
    if not training or layer.stddev == 0:
      return inputs
    return inputs + tf.random.normal(tf.shape(inputs), stddev=layer.stddev,
                                     dtype=inputs.dtype)
  return call


def _per_example_gaussian_dropout(
    layer: typing.Any) -> typing.Callable[..., typing.Any]:
  def call(inputs: typing.Any, training: typing.Any = False) -> typing.Any:
    if not training or layer.rate == 0:
      return inputs
    stddev = (layer.rate / (1.0 - layer.rate)) ** 0.5
    return inputs * tf.random.normal(tf.shape(inputs), mean=1.0,
                                     stddev=stddev, dtype=inputs.dtype)
  return call


# Keras 3's random layers, by class name: each draws from a stateless
# SeedGenerator, which gives every example the same draw inside
# tf.vectorized_map; the patch draws with stateful TF ops instead.
_RANDOM_LAYER_PATCHES = {
    "Dropout": _per_example_dropout,
    "SpatialDropout1D": _per_example_dropout,
    "SpatialDropout2D": _per_example_dropout,
    "SpatialDropout3D": _per_example_dropout,
    "GaussianNoise": _per_example_gaussian_noise,
    "GaussianDropout": _per_example_gaussian_dropout,
}


def make_randomness_per_example(layer: typing.Any) -> None:
  """Makes ``layer`` draw independently for each example under
  ``tf.vectorized_map``, or refuses it.

  Keras 3's Dropout, SpatialDropout, GaussianNoise and GaussianDropout get a
  ``call`` that uses stateful TF random ops (same distribution, one draw per
  example). Only Keras's own classes are patched: a user class of the same
  name is left alone.

  Raises:
    ValueError: for dropout inside an RNN cell, and for any other layer
      that draws from a Keras SeedGenerator (every example would get the
      same draw), with the fix.
  """
  cls = type(layer).__name__
  patch = _RANDOM_LAYER_PATCHES.get(cls)
  if patch is not None and type(layer) is not getattr(  # pylint: disable=unidiomatic-typecheck
      module().layers, cls, None):
    patch = None  # Same name, another class: not Keras's random layer.
  if patch is not None:
    layer.call = patch(layer)
  elif hasattr(layer, "recurrent_dropout") or hasattr(layer, "cell"):
    if (getattr(layer, "dropout", 0) or 0) > 0 or (
        getattr(layer, "recurrent_dropout", 0) or 0) > 0:
      raise errors.UnsupportedModelError(
          f"Layer {layer.name!r} ({cls}) uses dropout inside a Keras 3 RNN "
          f"cell, whose masks would be shared by all examples under "
          f"tf.vectorized_map. Set dropout=0 and recurrent_dropout=0, and "
          f"put a keras.layers.Dropout before or after the RNN instead.")
  elif getattr(layer, "seed_generator", None) is not None:
    raise errors.UnsupportedModelError(
        f"Layer {layer.name!r} ({cls}) draws randomness from a Keras 3 "
        f"SeedGenerator; inside tf.vectorized_map every example would get "
        f"the same draw. Replace it with a layer that uses tf.random ops.")


# --- Losses. ---


def get_loss(identifier: typing.Any) -> typing.Any:
  """A Keras loss from its name (or the object itself)."""
  return module().losses.get(identifier)


def loss_container(model: typing.Any) -> typing.Any:
  """The compiled-loss container of ``model`` (``compile(loss=...)``), or
  None before ``compile``."""
  return getattr(model, "_compile_loss", None)


class _Built(Exception):
  """Raised by ``build_loss_container`` once the container is built."""


def build_loss_container(container: typing.Any, y_true: typing.Any,
                         y_pred: typing.Any) -> None:
  """Builds the container for these labels and predictions, once.

  Keras builds it inside ``call``, after matching the labels' structure to
  the outputs' (labels given as a dict by output name for a list of
  outputs, for example); ``call`` runs on a view whose ``build`` builds the
  container and stops there, so that it is built from the same matched
  structures and computes nothing.
  """
  if getattr(container, "built", False):
    return
  view = object.__new__(type(container))
  view.__dict__.update(container.__dict__)

  def build(matched_y_true: typing.Any,
            matched_y_pred: typing.Any) -> typing.NoReturn:
    container.build(matched_y_true, matched_y_pred)
    raise _Built()

  view.build = build
  try:
    view.call(y_true, y_pred)
  except _Built:
    pass
  if not getattr(container, "built", False):
    container.build(y_true, y_pred)


def _is_mean_reduction(loss_obj: typing.Any) -> bool:
  return str(getattr(loss_obj, "reduction", "sum_over_batch_size")).lower() in (
      "sum_over_batch_size", "mean", "auto", "mean_with_sample_weight")


class _Rescaled:
  """A loss function multiplied by a constant."""

  def __init__(self, loss_fn: typing.Callable[..., typing.Any],
               factor: float) -> None:
    self._loss_fn = loss_fn
    self._factor = factor
    self.name = getattr(loss_fn, "name", "loss")
    self.reduction = getattr(loss_fn, "reduction", None)

  def __call__(self, *args: typing.Any, **kwargs: typing.Any) -> typing.Any:
    return self._loss_fn(*args, **kwargs) * self._factor


class _Untracked:
  """Stands in for one output's loss tracker: records nothing, counts the
  values it was offered."""

  def __init__(self) -> None:
    self.calls = 0

  def update_state(self, *args: typing.Any, **kwargs: typing.Any) -> None:
    del args, kwargs
    self.calls += 1


def batch_of_one_loss(
    container: typing.Any) -> typing.Callable[..., typing.Any]:
  """``f(y, y_pred, sample_weight) -> scalar``: the compiled loss of a batch.

  A private view of the ``CompileLoss`` container with the same structure
  handling and loss weights (every output's loss, weighted and summed), but
  whose per-output loss trackers record nothing, and with its per-replica
  scaling of each mean loss undone (the DP step sums clipped records across
  replicas itself).

  Raises:
    RuntimeError: if the container computed fewer losses than it holds
      (a Keras version whose ``CompileLoss`` this adapter does not know).
  """
  view = object.__new__(type(container))
  view.__dict__.update(container.__dict__)
  # ``call`` pairs each loss with a tracker (zip): one per loss, or the
  # losses past the first are dropped.
  trackers = [_Untracked() for _ in container._flat_losses]  # pylint: disable=protected-access
  view.__dict__["_metrics"] = trackers
  replicas = tf.distribute.get_strategy().num_replicas_in_sync
  if replicas > 1:
    flat = []
    for entry in container._flat_losses:  # pylint: disable=protected-access
      loss_fn = entry[1]
      if _is_mean_reduction(loss_fn):
        loss_fn = _Rescaled(loss_fn, float(replicas))
      flat.append(type(entry)(entry[0], loss_fn, *entry[2:]))
    view.__dict__["_flat_losses"] = flat

  def loss(y_true: typing.Any, y_pred: typing.Any,
           sample_weight: typing.Any = None) -> typing.Any:
    for tracker in trackers:
      tracker.calls = 0
    value = view.call(y_true, y_pred, sample_weight)
    computed = sum(tracker.calls for tracker in trackers)
    if tf.nest.is_nested(y_pred) and computed != len(trackers):
      raise RuntimeError(
          f"tf_dp read {computed} of the {len(trackers)} compiled losses "
          f"from Keras {module().__version__}'s CompileLoss; training would "
          f"drop the others. Please report this Keras version to tf_dp.")
    return value

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


def _layer_regularizers(layer: typing.Any) -> typing.List[typing.Any]:
  out = []
  for attr, var_attr in (("kernel_regularizer", "kernel"),
                         ("bias_regularizer", "bias"),
                         ("embeddings_regularizer", "embeddings")):
    reg = getattr(layer, attr, None)
    var = getattr(layer, var_attr, None)
    if reg is not None and var is not None and getattr(
        var, "regularizer", None) is None:
      out.append(reg(var))
  return out


def weight_regularization_terms(model: typing.Any) -> typing.List[typing.Any]:
  """The weight regularisers' penalties (terms that read no data)."""
  terms = [v.regularizer(v) for v in model.trainable_weights
           if getattr(v, "regularizer", None) is not None]
  return terms + [term for layer in all_layers(model)
                  for term in _layer_regularizers(layer)]


def reported_loss(model: typing.Any, x: typing.Any, y: typing.Any,
                  y_pred: typing.Any, sample_weight: typing.Any,
                  penalty: typing.Optional[tf.Tensor]) -> typing.Any:
  """The batch loss Keras reports for a step, added to its loss tracker.

  ``penalty`` (or None) stands for ``model.losses``: the ``add_loss``
  terms evaluated on a public input by the DP step.
  """
  if penalty is not None:
    model._losses_override = [penalty]  # pylint: disable=protected-access
  try:
    loss = model.compute_loss(x, y, y_pred, sample_weight)
  finally:
    model._losses_override = []  # pylint: disable=protected-access
  # Keras 3's compute_loss does not track the loss.
  batch = tf.shape(tf.nest.flatten(x)[0])[0]
  model._loss_tracker.update_state(loss, sample_weight=batch)  # pylint: disable=protected-access
  return loss


# --- Optimizers, layers and callbacks. ---


def clone_model(model: typing.Any,
                clone_function: typing.Callable[[typing.Any], typing.Any],
                replaced: typing.Container[int]) -> typing.Any:
  """``keras.models.clone_model`` with ``clone_function``, nested models
  too; a new layer whose id is in ``replaced`` is called without the
  ``mask`` its original's call recorded (a replacement may not take one).
  """
  def call_function(layer: typing.Any, *args: typing.Any,
                    **kwargs: typing.Any) -> typing.Any:
    if id(layer) in replaced:
      kwargs.pop("mask", None)
    return layer(*args, **kwargs)
  return module().models.clone_model(model, clone_function=clone_function,
                                     call_function=call_function,
                                     recursive=True)


def group_normalization(**kwargs: typing.Any) -> typing.Any:
  """A new ``keras.layers.GroupNormalization``."""
  return module().layers.GroupNormalization(**kwargs)


def get_optimizer(identifier: typing.Any) -> typing.Any:
  """A Keras optimizer from its name (or the object itself)."""
  return module().optimizers.get(identifier)


class CallbackHooks:
  """What Keras 3's ``CallbackList`` asks of a callback beyond the public
  interface (``set_model``, ``set_params``, ``on_*``): nothing."""


def prepare_fit_across_workers(model: typing.Any) -> None:
  """Lets Keras 3's ``fit`` train ``model`` under a strategy that spans
  several workers (``MultiWorkerMirroredStrategy``, TF 2.21): before its
  first step, ``fit`` builds the model's metrics and optimizer on a batch
  it reduces across the workers eagerly, which that strategy refuses
  (converting a per-replica value to a tensor). The model is built on this
  worker's first replica's part instead; nothing else changes."""

  def symbolic_build(self: typing.Any, iterator: typing.Any = None,
                     data_batch: typing.Any = None) -> None:
    if iterator is not None:
      for _, _, batches in iterator:
        data_batch = tf.nest.map_structure(
            lambda v: (self.distribute_strategy.experimental_local_results(
                v)[0] if isinstance(v, tf.distribute.DistributedValues)
                       else v), next(batches))
        break
    with self.distribute_strategy.scope():
      self._symbolic_build(data_batch=data_batch)

  model._maybe_symbolic_build = types.MethodType(symbolic_build, model)


def logs_across_workers(logs: typing.Dict[str, typing.Any]
                        ) -> typing.Dict[str, typing.Any]:
  """A train step's logs as Keras 3's ``fit`` can reduce them under a
  strategy that spans several workers: it takes the mean of each over
  axis 0 across the replicas, so each scalar becomes a vector of one."""
  return {name: tf.reshape(value, [1]) for name, value in logs.items()}
