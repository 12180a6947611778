"""Per-example losses that cannot mix examples, by construction.

Whatever was given to ``model.compile`` (a loss name, a function, a ``Loss``
object, a list or dict per output, ``loss_weights``) and whatever weights
``fit`` passes (``sample_weight``, ``class_weight``), the per-example loss of
example ``i`` is Keras's own compiled loss evaluated on a batch holding only
example ``i``: ``tf.vectorized_map`` runs that one-example computation for
every example (a few examples in eager mode: a Python loop over them), and
its iterations are independent by definition, so example ``i``'s loss reads
example ``i``'s labels, predictions and weights and nothing else. Keras's rank alignment (labels ``(B,)`` against outputs
``(B, 1)``), its reduction over the non-batch axes, the per-output loss
weights and the sample weights are applied exactly as for a batch.

For the default reduction (``"sum_over_batch_size"``) the batch mean of the
per-example losses equals the loss Keras reports for the batch. Two
deliberate differences: the loss is not divided by the number of replicas
under ``tf.distribute`` (the DP step sums clipped records across replicas),
and a masked sequence loss is normalised by the example's own number of
unmasked positions (Keras divides by the batch's, which couples examples).
"""

from typing import Any, Callable, Dict, List, Optional, Set, Tuple, cast

import numpy as np
import tensorflow as tf

from tf_dp.keras import backend

NO_LOSS_ERROR = ("Compile the model with a loss before training with tf_dp: "
                 "model.compile(optimizer=tf_dp.DPOptimizer(...), loss=...).")


def _leading_one(t: Any) -> Any:
  return None if t is None else tf.expand_dims(t, 0)


# Up to this many examples, an eager call runs ``one`` on each example in a
# Python loop: ``tf.vectorized_map`` traces a new function on every eager
# call (about 0.4 s), a few eager loss evaluations take milliseconds.
_EAGER_LOOP_MAX_EXAMPLES = 16


def _examples_to_loop_over(structure: Any) -> Optional[Tuple[Any, int]]:
  """``structure``'s leaves as dense tensors and their common number of
  examples, when the batch is small, static and every leaf dense; else
  None."""
  leaves = tf.nest.flatten(structure)
  if any(isinstance(t, (tf.RaggedTensor, tf.SparseTensor)) or
         not (tf.is_tensor(t) or isinstance(t, np.ndarray)) for t in leaves):
    return None
  leaves = [tf.convert_to_tensor(t) for t in leaves]
  sizes = {t.shape[0] if t.shape.rank else None for t in leaves}
  if len(sizes) != 1 or None in sizes:
    return None
  (size,) = cast(Set[int], sizes)
  if not 0 < size <= _EAGER_LOOP_MAX_EXAMPLES:
    return None
  return tf.nest.pack_sequence_as(structure, leaves), size


def _map_examples(one: Callable[[Any], tf.Tensor], structure: Any) -> tf.Tensor:
  """``[one(example 0), one(example 1), ...]`` as a ``[batch]`` tensor,
  where example ``i`` is entry ``i`` of every leaf of ``structure``.

  ``one`` sees example ``i``'s slice only, whichever way it runs:
  ``tf.vectorized_map`` (whose iterations are independent by definition),
  or, for a few dense examples in eager mode, a Python loop over the
  slices (a small batch evaluated eagerly: no function to trace).
  """
  if tf.executing_eagerly():
    small = _examples_to_loop_over(structure)
    if small is not None:
      dense, size = small
      return tf.reshape(tf.stack([
          one(tf.nest.map_structure(lambda t, i=i: t[i], dense))
          for i in range(size)]), [-1])
  return tf.reshape(tf.vectorized_map(one, structure,
                                      fallback_to_while_loop=True), [-1])


def per_example_loss_fn(model: Any) -> Callable[..., tf.Tensor]:
  """Returns ``f(y_true, y_pred, sample_weight) -> [batch]`` float32 losses.

  Privacy contract: entry ``i`` of the result depends on example ``i``'s
  labels, predictions, mask and sample weight only (it is Keras's compiled
  loss of the batch that holds example ``i`` alone).

  Raises:
    ValueError: if the model was compiled without a loss.
  """
  keras_backend = backend.for_object(model)
  container = keras_backend.loss_container(model)
  if container is None or getattr(model, "loss", None) is None:
    raise ValueError(NO_LOSS_ERROR)

  def per_example(y_true: Any, y_pred: Any,
                  sample_weight: Any = None) -> tf.Tensor:
    if y_true is None:
      raise ValueError("tf_dp needs labels: fit(x, y) or a dataset of "
                       "(x, y[, sample_weight]).")
    keras_backend.build_loss_container(container, y_true, y_pred)
    one_loss = keras_backend.batch_of_one_loss(container)
    preds = tf.nest.flatten(y_pred)
    masks = [keras_backend.output_mask(p) for p in preds]
    mapped = {"y": y_true, "p": y_pred,
              "m": [m for m in masks if m is not None]}
    if sample_weight is not None:
      mapped["w"] = sample_weight

    def one(example: Dict[str, Any]) -> tf.Tensor:
      pred = tf.nest.map_structure(_leading_one, example["p"])
      flat_pred = tf.nest.flatten(pred)
      mask_iter = iter(example["m"])
      for p, m in zip(flat_pred, masks):
        if m is not None:
          keras_backend.set_output_mask(p, _leading_one(next(mask_iter)))
      pred = tf.nest.pack_sequence_as(pred, flat_pred)
      value = one_loss(tf.nest.map_structure(_leading_one, example["y"]),
                       pred,
                       tf.nest.map_structure(_leading_one,
                                             example.get("w")))
      value = tf.cast(tf.convert_to_tensor(value), tf.float32)
      if value.shape.rank:
        value = tf.reduce_mean(value)
      return value

    return _map_examples(one, mapped)

  # Read by the privacy gate (``tf_dp.keras.privacy_gate``).
  setattr(per_example, "each_example_alone", True)
  return per_example


def per_example_loss_from(loss: Any,
                          keras_backend: Any) -> Callable[..., tf.Tensor]:
  """``f(y_true, y_pred, sample_weight) -> [batch]`` float32 losses from a
  loss given by hand (custom training loops).

  ``loss`` is a Keras loss name or object, or a function ``(y_true,
  y_pred) -> loss``; a name is looked up in the Keras of
  ``keras_backend`` (the model's adapter, ``tf_dp.keras.backend``).
  Privacy contract: entry ``i`` is ``loss`` evaluated on a batch holding
  example ``i`` alone (averaged over its non-batch axes), times its sample
  weight: it reads no other example, whatever ``loss`` does with its batch.
  The same ``loss`` (a name, or the same object) gives the same function,
  so that eager steps reuse their traced step.
  """
  for given, backend, made in _MADE:
    if (given == loss if isinstance(loss, str) else given is loss) and (
        backend is keras_backend):
      return made
  made = _per_example_loss_from(loss, keras_backend)
  _MADE[:] = _MADE[-15:] + [(loss, keras_backend, made)]
  return made


def _unreduced(loss: Any) -> Any:
  """A copy of a Keras loss object with ``reduction="none"`` (it is
  evaluated on one example at a time, where every reduction gives the
  same value), so that Keras 2 accepts it inside a ``tf.distribute``
  replica; anything else unchanged."""
  reduction = getattr(loss, "reduction", None)
  if reduction in (None, "none") or not hasattr(loss, "get_config"):
    return loss
  try:
    return type(loss).from_config(dict(loss.get_config(), reduction="none"))
  except (TypeError, ValueError):  # A subclass with its own constructor.
    return loss


# The last functions per_example_loss_from made: (loss, backend, function).
_MADE: List[Tuple[Any, Any, Callable[..., tf.Tensor]]] = []


def _per_example_loss_from(loss: Any,
                           keras_backend: Any) -> Callable[..., tf.Tensor]:
  if isinstance(loss, str):
    loss = keras_backend.get_loss(loss)
  if not callable(loss):
    raise ValueError(f"loss must be a Keras loss (name or object) or a "
                     f"function (y_true, y_pred) -> loss; got {loss!r}.")
  loss = _unreduced(loss)

  def per_example(y_true: Any, y_pred: Any,
                  sample_weight: Any = None) -> tf.Tensor:
    def one(example: Tuple[Any, Any]) -> tf.Tensor:
      value = loss(tf.nest.map_structure(_leading_one, example[0]),
                   tf.nest.map_structure(_leading_one, example[1]))
      return tf.reduce_mean(tf.cast(tf.convert_to_tensor(value), tf.float32))

    values = _map_examples(one, (y_true, y_pred))
    if sample_weight is not None:
      values *= tf.reshape(tf.cast(sample_weight, tf.float32), [-1])
    return values

  # Read by the privacy gate (``tf_dp.keras.privacy_gate``).
  setattr(per_example, "each_example_alone", True)
  return per_example
