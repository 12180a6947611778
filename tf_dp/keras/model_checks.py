"""Model validation and per-example randomness for ``make_private``.

* BatchNormalization is not refused here: in training mode it normalises
  with the batch's statistics, which the privacy gate
  (``tf_dp.keras.privacy_gate``) refuses when the step is traced; frozen
  (``trainable=False``) or called with ``training=False`` it uses its moving
  statistics, keeps examples apart and trains.
* Activity regularisers depend on the data and are not clipped per example.
  Refused. ``add_loss`` terms are evaluated on a public input (no data) and
  added outside the clipped sum; one that depends on the data is refused at
  the first step (``public_penalty``).
* Keras 3's Dropout, GaussianNoise and GaussianDropout draw from a stateless
  ``SeedGenerator``: under ``tf.vectorized_map`` every example would get the
  same mask. Their ``call`` is switched to stateful TF random ops, which
  draw independently per example. Other seeded layers are refused. (What a
  flavour needs is its adapter's ``make_randomness_per_example``.)
"""

from typing import Any, Callable, Iterable, List, Optional, Tuple

import tensorflow as tf

from tf_dp.errors import UnsupportedModelError
from tf_dp.keras import backend

MIXED_PRECISION_ERROR = (
    "Layer {name!r} computes in {compute} (dtype policy {policy!r}): "
    "float16 needs loss scaling, which Keras adds by wrapping the optimizer "
    "in a LossScaleOptimizer that would scale the clipped, noised gradient "
    "(not each example's gradient before clipping), so tf_dp refuses it. "
    "Use keras.mixed_precision.set_global_policy('mixed_bfloat16') (same "
    "speed-up on hardware with bfloat16 units, no loss scaling: tf_dp runs "
    "the forward and backward passes in bfloat16 and clips and noises in "
    "float32) or 'float32', and build the model under it.")


def all_layers(model: Any) -> List[Any]:
  """Every layer inside ``model``, recursively (not ``model`` itself)."""
  return backend.for_object(model).all_layers(model)


def validate_and_prepare(model: Any) -> None:
  """Refuses layers that break per-example DP; makes random layers draw
  independently per example (Keras 3; see the backend's
  ``make_randomness_per_example``)."""
  keras_backend = backend.for_object(model)
  layers = keras_backend.all_layers(model)
  for layer in [model] + layers:
    compute = str(getattr(layer, "compute_dtype", None))
    if compute == "float16" and compute != str(
        getattr(layer, "variable_dtype", compute)):
      policy = getattr(layer, "dtype_policy", None)
      raise UnsupportedModelError(MIXED_PRECISION_ERROR.format(
          name=layer.name, compute=compute,
          policy=getattr(policy, "name", policy)))
  for layer in layers:
    if getattr(layer, "activity_regularizer", None) is not None:
      raise UnsupportedModelError(
          f"Layer {layer.name!r} has an activity_regularizer: it depends on "
          f"the data and would not be clipped per example. Remove it, or "
          f"use weight regularisers (kernel_regularizer), which are public.")
    keras_backend.make_randomness_per_example(layer)


DATA_DEPENDENT_LOSS_ERROR = (
    "A layer of this model adds a loss with add_loss() that depends on the "
    "input data: tf_dp cannot clip it per example, so training with it "
    "would not be private. Compute that term inside the compiled loss (it "
    "is then clipped with the rest of each example's loss), or make it "
    "depend on the weights only.")


def _added_loss_terms(model: Any) -> List[Any]:
  """The ``add_loss`` terms of the model's most recent call."""
  keras_backend = backend.for_object(model)
  return [t for layer in [model] + keras_backend.all_layers(model)
          for t in keras_backend.added_loss_terms(layer)]


def _float32_sum(terms: Iterable[Any]) -> Optional[tf.Tensor]:
  """The float32 sum of scalar loss terms, or None if there are none."""
  terms = [tf.cast(t, tf.float32) for t in terms]
  return tf.add_n(terms) if terms else None


def adds_losses(model: Any, x: Any) -> bool:
  """Whether a call of ``model`` adds ``add_loss`` terms.

  Decided once per model by tracing (never running) a call on a batch of
  one, and cached.
  """
  cached = getattr(model, "_tf_dp_adds_losses", None)
  if cached is None:
    spec = tf.nest.map_structure(
        lambda t: tf.TensorSpec([1] + list(t.shape[1:]), t.dtype), x)
    tf.function(lambda t: model(t, training=True)).get_concrete_function(
        spec)
    cached = bool(_added_loss_terms(model))
    model._tf_dp_adds_losses = cached  # pylint: disable=protected-access
  return cached


def _public_batch_of_one(x: Any, draw: Callable[[Any], tf.Tensor]) -> Any:
  """A batch of one shaped like ``x``: floating-point entries ``draw(shape)``;
  integer and boolean entries 0 under ``tf.zeros`` and 1 under any other
  ``draw`` (valid ids and masks), so that they differ from the zeros input
  in every entry, not only where a random draw happens to (ids drawn in
  {0, 1} would all be 0 with probability 2^-size, and the check would
  then compare an input with itself)."""
  def one(t: tf.Tensor) -> tf.Tensor:
    shape = tf.concat([[1], tf.shape(t)[1:]], 0)
    if t.dtype.is_floating:
      return tf.cast(draw(shape), t.dtype)
    return tf.cast(tf.fill(shape, 0 if draw is tf.zeros else 1), t.dtype)
  return tf.nest.map_structure(one, x)


def public_penalty(model: Any,
                   x: Any) -> Tuple[tf.Tensor, List[Optional[tf.Tensor]]]:
  """``model.losses`` (``add_loss`` terms and regularisers) evaluated on a
  public input, and its gradient.

  The input is a batch of one that holds no data (zeros); the same terms on
  another public input (random normal floats, integer entries 1) must
  agree, otherwise the loss depends on the data and the step fails with
  ``DATA_DEPENDENT_LOSS_ERROR``.
  Returns ``(penalty, gradients)``: nothing in them depends on the batch.
  Both wait for the check; a step must wait for ``penalty`` (as
  ``tf_dp.keras.dp_step.private_step`` does) for the check to come before
  any update: a gradient that is None waits for nothing.
  """
  variables = model.trainable_variables
  with tf.GradientTape() as tape:
    model(_public_batch_of_one(x, tf.zeros), training=True)
    penalty = _float32_sum(model.losses)
  grads = tape.gradient(penalty, variables)
  model(_public_batch_of_one(x, tf.random.normal), training=True)
  other = _float32_sum(model.losses)
  same = tf.debugging.assert_near(penalty, other, rtol=1e-5, atol=1e-7,
                                  message=DATA_DEPENDENT_LOSS_ERROR)
  with tf.control_dependencies([same]):
    return tf.identity(penalty), [
        None if g is None else tf.identity(g) for g in grads]


def weight_regularization_loss(model: Any) -> Optional[tf.Tensor]:
  """Sum of the data-independent regularisation losses (or None)."""
  return _float32_sum(
      backend.for_object(model).weight_regularization_terms(model))
