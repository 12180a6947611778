"""Per-example losses from whatever was given to ``model.compile(loss=...)``."""

import tensorflow as tf

from tf_dp.keras import compat


def _resolve(loss, flavor):
  keras = compat.module_for(flavor)
  if isinstance(loss, str):
    return keras.losses.get(loss)
  if isinstance(loss, keras.losses.Loss):
    return loss.call  # Loss.call returns the unreduced per-example losses.
  if callable(loss):
    return loss
  raise ValueError(
      f"tf_dp supports one loss (a keras Loss, its name, or a function "
      f"returning one loss per example); got {loss!r}. Models with several "
      f"outputs and losses are not supported yet.")


def per_example_loss_fn(model, flavor):
  """Returns ``f(y_true, y_pred) -> [batch]`` for the model's compiled loss.

  Raises:
    ValueError: if the model has no loss, several losses, or (when called)
      the loss returns a scalar instead of one value per example.
  """
  loss = getattr(model, "loss", None)
  if loss is None:
    raise ValueError("Compile the model with a loss before training with "
                     "tf_dp: model.compile(optimizer=..., loss=...).")
  fn = _resolve(loss, flavor)

  def per_example(y_true, y_pred):
    values = tf.convert_to_tensor(fn(y_true, y_pred))
    if values.shape.rank == 0:
      raise ValueError(
          f"The loss {loss!r} returned a scalar for a batch: tf_dp needs one "
          f"loss per example. Pass a keras.losses.Loss object or a loss "
          f"function that does not average over the batch (for a custom "
          f"Loss, reduction is ignored: tf_dp calls its per-example `call`).")
    if values.shape.rank > 1:
      values = tf.reduce_mean(values, axis=list(range(1, values.shape.rank)))
    return values

  return per_example
