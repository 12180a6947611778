"""Per-example losses that cannot mix examples, by construction.

Whatever was given to ``model.compile`` (a loss name, a function, a ``Loss``
object, a list or dict per output, ``loss_weights``) and whatever weights
``fit`` passes (``sample_weight``, ``class_weight``), the per-example loss of
example ``i`` is Keras's own compiled loss evaluated on a batch holding only
example ``i``: ``tf.vectorized_map`` runs that one-example computation for
every example, and its iterations are independent by definition, so example
``i``'s loss reads example ``i``'s labels, predictions and weights and
nothing else. Keras's rank alignment (labels ``(B,)`` against outputs
``(B, 1)``), its reduction over the non-batch axes, the per-output loss
weights and the sample weights are applied exactly as for a batch.

For the default reduction (``"sum_over_batch_size"``) the batch mean of the
per-example losses equals the loss Keras reports for the batch. Two
deliberate differences: the loss is not divided by the number of replicas
under ``tf.distribute`` (the DP step sums clipped records across replicas),
and a masked sequence loss is normalised by the example's own number of
unmasked positions (Keras divides by the batch's, which couples examples).
"""

import tensorflow as tf

from tf_dp.keras import backend

NO_LOSS_ERROR = ("Compile the model with a loss before training with tf_dp: "
                 "model.compile(optimizer=tf_dp.DPOptimizer(...), loss=...).")


def _leading_one(t):
  return None if t is None else tf.expand_dims(t, 0)


def per_example_loss_fn(model):
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

  def per_example(y_true, y_pred, sample_weight=None):
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

    def one(example):
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

    values = tf.vectorized_map(one, mapped, fallback_to_while_loop=True)
    return tf.reshape(values, [-1])

  return per_example


def per_example_loss_from(loss, keras_backend):
  """``f(y_true, y_pred, sample_weight) -> [batch]`` float32 losses from a
  loss given by hand (custom training loops).

  ``loss`` is a Keras loss name or object, or a function ``(y_true,
  y_pred) -> loss``; a name is looked up in the Keras of
  ``keras_backend`` (the model's adapter, ``tf_dp.keras.backend``).
  Privacy contract: entry ``i`` is ``loss`` evaluated on a batch holding
  example ``i`` alone (averaged over its non-batch axes), times its sample
  weight: it reads no other example, whatever ``loss`` does with its batch.
  """
  if isinstance(loss, str):
    loss = keras_backend.get_loss(loss)
  if not callable(loss):
    raise ValueError(f"loss must be a Keras loss (name or object) or a "
                     f"function (y_true, y_pred) -> loss; got {loss!r}.")

  def per_example(y_true, y_pred, sample_weight=None):
    def one(example):
      value = loss(tf.nest.map_structure(_leading_one, example[0]),
                   tf.nest.map_structure(_leading_one, example[1]))
      return tf.reduce_mean(tf.cast(tf.convert_to_tensor(value), tf.float32))

    values = tf.reshape(tf.vectorized_map(one, (y_true, y_pred),
                                          fallback_to_while_loop=True), [-1])
    if sample_weight is not None:
      values *= tf.reshape(tf.cast(sample_weight, tf.float32), [-1])
    return values

  return per_example
