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

import sys

import tensorflow as tf

NO_LOSS_ERROR = ("Compile the model with a loss before training with tf_dp: "
                 "model.compile(optimizer=tf_dp.DPOptimizer(...), loss=...).")


def _container(model, flavor):
  """Keras's compiled-loss object of ``model`` (flavour-specific)."""
  name = "_compile_loss" if flavor == "keras3" else "compiled_loss"
  container = getattr(model, name, None)
  if container is None or getattr(model, "loss", None) is None:
    raise ValueError(NO_LOSS_ERROR)
  return container


def _replicas():
  strategy = tf.distribute.get_strategy()
  return strategy.num_replicas_in_sync


def _is_mean_reduction(loss_obj):
  return str(getattr(loss_obj, "reduction", "sum_over_batch_size")).lower() in (
      "sum_over_batch_size", "mean", "auto", "mean_with_sample_weight")


def _keras3_batch_of_one_loss(container):
  """``f(y, y_pred, sample_weight) -> scalar`` on a batch of one (Keras 3).

  A private view of ``CompileLoss`` with the same structure handling and
  loss weights, but without its per-output loss trackers and with the
  per-replica scaling of each loss undone.
  """
  view = object.__new__(type(container))
  view.__dict__.update(container.__dict__)
  view.__dict__["_metrics"] = []
  replicas = _replicas()
  if replicas > 1:
    flat = []
    for entry in container._flat_losses:  # pylint: disable=protected-access
      loss_fn = entry[1]
      if _is_mean_reduction(loss_fn):
        loss_fn = _Rescaled(loss_fn, float(replicas))
      flat.append(type(entry)(entry[0], loss_fn, *entry[2:]))
    view.__dict__["_flat_losses"] = flat
  return view.call


class _Rescaled:
  """A loss function multiplied by a constant."""

  def __init__(self, loss_fn, factor):
    self._loss_fn = loss_fn
    self._factor = factor
    self.name = getattr(loss_fn, "name", "loss")
    self.reduction = getattr(loss_fn, "reduction", None)

  def __call__(self, *args, **kwargs):
    return self._loss_fn(*args, **kwargs) * self._factor


def _keras2_batch_of_one_loss(container):
  """``f(y, y_pred, sample_weight) -> scalar`` on a batch of one (Keras 2).

  The per-output loop of ``LossesContainer.__call__``: structure conformed
  to the outputs, ranks and dtypes matched, masks applied to the weights,
  each output's loss object called with its reduction and multiplied by its
  loss weight; without the loss trackers and the per-replica scaling.
  """
  # The container's own module (tf_keras, or keras 2.15 inside TF 2.15).
  compile_utils = sys.modules[type(container).__module__]
  losses_utils = compile_utils.losses_utils

  def loss(y_true, y_pred, sample_weight):
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


def _build(container, flavor, y, y_pred):
  if getattr(container, "built", False):
    return
  if flavor == "keras3":
    container.build(y, y_pred)
  else:
    container.build(y_pred)


def _leading_one(t):
  return None if t is None else tf.expand_dims(t, 0)


def per_example_loss_fn(model, flavor):
  """Returns ``f(y_true, y_pred, sample_weight) -> [batch]`` float32 losses.

  Privacy contract: entry ``i`` of the result depends on example ``i``'s
  labels, predictions, mask and sample weight only (it is Keras's compiled
  loss of the batch that holds example ``i`` alone).

  Raises:
    ValueError: if the model was compiled without a loss.
  """
  container = _container(model, flavor)

  def per_example(y_true, y_pred, sample_weight=None):
    if y_true is None:
      raise ValueError("tf_dp needs labels: fit(x, y) or a dataset of "
                       "(x, y[, sample_weight]).")
    _build(container, flavor, y_true, y_pred)
    if flavor == "keras3":
      one_loss = _keras3_batch_of_one_loss(container)
    else:
      one_loss = _keras2_batch_of_one_loss(container)
    preds = tf.nest.flatten(y_pred)
    masks = [getattr(p, "_keras_mask", None) for p in preds]
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
          p._keras_mask = _leading_one(next(mask_iter))  # pylint: disable=protected-access
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


def per_example_loss_from(loss, flavor):
  """``f(y_true, y_pred, sample_weight) -> [batch]`` float32 losses from a
  loss given by hand (custom training loops).

  ``loss`` is a Keras loss name or object, or a function ``(y_true,
  y_pred) -> loss``. Privacy contract: entry ``i`` is ``loss`` evaluated on
  a batch holding example ``i`` alone (averaged over its non-batch axes),
  times its sample weight: it reads no other example, whatever ``loss``
  does with its batch.
  """
  if isinstance(loss, str):
    from tf_dp.keras import compat  # pylint: disable=g-import-not-at-top
    loss = compat.module_for(flavor).losses.get(loss)
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
