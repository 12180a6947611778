"""Per-example (or per-microbatch) gradients with ``tf.vectorized_map``.

The model is re-run on each record inside the mapped function (a forward and
a backward pass per record), which is O(batch) work, unlike the jacobian of
the loss vector (O(batch^2)). A record is one example, or one microbatch of
``batch_size / num_microbatches`` consecutive examples whose gradient is the
mean over its examples.
"""

from absl import logging
import tensorflow as tf

from tf_dp.keras import model_checks


def gradients_or_zeros(grads, variables):
  """Dense gradients, with zeros where a variable does not affect the loss.

  (``unconnected_gradients=ZERO`` fails on Keras 3 variables, whose dtype is
  a string.)
  """
  return [tf.zeros(v.shape, tf.as_dtype(v.dtype)) if g is None
          else tf.convert_to_tensor(g) for g, v in zip(grads, variables)]


def is_masked_rnn(layer, mask=None):
  """A recurrent layer called with a mask: pfor converts its TensorList
  loop into a program that fails at run time."""
  return hasattr(layer, "cell") and mask is not None


def pfor_breaks_recurrence(layers):
  """Whether a whole-model ``tf.vectorized_map`` would mis-convert a
  recurrent layer among ``layers``: pfor turns the layer's TensorList loop
  into a program that fails at run time when the layer's input comes from
  an Embedding lookup or carries a mask (measured on Keras 3 and tf-keras
  with TF 2.21)."""
  feeds = any(getattr(layer, "mask_zero", False) or type(layer).__name__ in (
      "Masking", "Embedding") for layer in layers)
  return feeds and any(hasattr(layer, "cell") for layer in layers)


def map_records(fn, elems, loop=False):
  """``fn`` applied to each record of ``elems``: ``tf.vectorized_map``, or
  a ``tf.map_fn`` loop when ``loop`` is set or pfor cannot convert the
  computation at all (e.g. tf-keras LSTM/GRU, whose TensorList variants pfor
  rejects). Both compute each record from that record alone.
  """
  if not loop:
    try:
      return tf.vectorized_map(fn, elems, fallback_to_while_loop=True)
    except (TypeError, ValueError, NotImplementedError) as e:
      logging.log_first_n(
          logging.WARNING, "tf_dp: tf.vectorized_map cannot convert the "
          "per-record computation (%s); a tf.map_fn loop computes it "
          "instead (slower).", 1, str(e).splitlines()[-1][:200])
  record_spec = tf.nest.map_structure(
      lambda t: tf.TensorSpec(t.shape[1:], t.dtype), elems)
  traced = tf.function(fn, autograph=False).get_concrete_function(
      record_spec).structured_outputs
  signature = tf.nest.map_structure(
      lambda t: tf.TensorSpec(t.shape, t.dtype), traced)
  return tf.map_fn(fn, elems, fn_output_signature=signature)


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

  grads, preds, losses = map_records(
      one_record, (xs, ys, ws),
      loop=pfor_breaks_recurrence(model_checks.all_layers(model)))
  merge = lambda t: tf.reshape(t, tf.concat([[-1], tf.shape(t)[2:]], 0))
  return grads, tf.nest.map_structure(merge, preds), merge(losses)
