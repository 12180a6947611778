"""Per-example (or per-microbatch) gradients with ``tf.vectorized_map``.

The model is re-run on each record inside the mapped function (a forward and
a backward pass per record), which is O(batch) work, unlike the jacobian of
the loss vector (O(batch^2)). A record is one example, or one microbatch of
``batch_size / num_microbatches`` consecutive examples whose gradient is the
mean over its examples.
"""

import tensorflow as tf


def gradients_or_zeros(grads, variables):
  """Dense gradients, with zeros where a variable does not affect the loss.

  (``unconnected_gradients=ZERO`` fails on Keras 3 variables, whose dtype is
  a string.)
  """
  return [tf.zeros(v.shape, tf.as_dtype(v.dtype)) if g is None
          else tf.convert_to_tensor(g) for g, v in zip(grads, variables)]


def split_into_records(tensor, num_microbatches):
  """Reshapes a batch to ``[records, examples_per_record, ...]``."""
  tensor = tf.convert_to_tensor(tensor)
  if num_microbatches is None:
    return tf.expand_dims(tensor, 1)
  message = (f"tf_dp: the batch size does not divide into num_microbatches"
             f"={num_microbatches}. Use a batch size that is a multiple of "
             f"num_microbatches and drop_remainder=True in tf.data (a short "
             f"last batch cannot be split into equal microbatches).")
  static_batch = tensor.shape[0]
  if static_batch is not None and static_batch % num_microbatches:
    raise ValueError(message + f" Got a batch of {static_batch}.")
  batch = tf.shape(tensor)[0]
  tf.debugging.assert_equal(batch % num_microbatches, 0, message=message)
  return tf.reshape(tensor, tf.concat(
      [[num_microbatches, batch // num_microbatches], tf.shape(tensor)[1:]],
      axis=0))


def record_gradients(model, per_example_loss_fn, x, y, sample_weight,
                     num_microbatches=None):
  """Gradients of each record's mean loss w.r.t. the trainable variables.

  Args:
    model: A Keras model.
    per_example_loss_fn: ``f(y_true, y_pred, sample_weight) -> [n]``
      weighted losses, one per example (``tf_dp.keras.losses``).
    x, y: The batch (nests of tensors with a leading batch axis).
    sample_weight: ``[batch]`` weights, a nest of them (one per output, as
      Keras passes them for several outputs), or None.
    num_microbatches: None for per-example records.

  Returns:
    ``(grads, y_pred, losses)``: grads is a list (one per trainable variable)
    of ``[records, *var.shape]`` tensors; ``y_pred`` the batch predictions and
    ``losses`` the ``[batch]`` weighted per-example losses.
  """
  variables = model.trainable_variables
  split = lambda t: split_into_records(t, num_microbatches)
  xs = tf.nest.map_structure(split, x)
  ys = tf.nest.map_structure(split, y)
  if sample_weight is None:
    batch = tf.shape(tf.nest.flatten(x)[0])[0]
    sample_weight = tf.ones([batch], tf.float32)
  ws = tf.nest.map_structure(lambda w: split(tf.cast(w, tf.float32)),
                             sample_weight)

  def one_record(args):
    xi, yi, wi = args
    with tf.GradientTape() as tape:
      pred = model(xi, training=True)
      losses = per_example_loss_fn(yi, pred, wi)
      loss = tf.reduce_mean(losses)
    grads = gradients_or_zeros(tape.gradient(loss, variables), variables)
    return grads, pred, losses

  grads, preds, losses = tf.vectorized_map(one_record, (xs, ys, ws),
                                           fallback_to_while_loop=True)
  merge = lambda t: tf.reshape(t, tf.concat([[-1], tf.shape(t)[2:]], 0))
  return grads, tf.nest.map_structure(merge, preds), merge(losses)
