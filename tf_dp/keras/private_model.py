"""``make_private``: give a Keras model a DP-SGD ``train_step``.

Keras 3 never shows an optimizer per-example losses with a tape, and Keras 2
only through an O(batch^2) jacobian, so the DP step must own the training
step. ``make_private(model)`` validates the model and replaces its
``train_step`` (on the instance, for Sequential, Functional and subclassed
models alike) with one that asks the model's ``tf_dp.DPOptimizer`` for
private gradients. Everything else (``compile``, ``fit``, callbacks,
``evaluate``, ``predict``) is unchanged.
"""

import types

import tensorflow as tf

from tf_dp.keras import compat
from tf_dp.keras import losses as losses_lib
from tf_dp.keras import model_checks
from tf_dp.keras import optimizer as optimizer_lib
from tf_dp.keras import per_example


def _dp_train_step(self, data):
  """The DP-SGD training step installed by ``make_private``."""
  flavor = self._tf_dp_flavor  # pylint: disable=protected-access
  keras = compat.module_for(flavor)
  x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
  for t in tf.nest.flatten((x, y)):
    if isinstance(t, (tf.RaggedTensor, tf.SparseTensor)):
      raise ValueError(
          f"tf_dp does not support {type(t).__name__} inputs or labels: "
          f"per-example gradients need dense batches. Pad the batch (e.g. "
          f"ragged.to_tensor()) and mask the padding in the model.")
  optimizer = self.optimizer
  if not optimizer_lib.is_dp_optimizer(optimizer):
    raise TypeError(
        "This model was converted with tf_dp.keras.make_private but compiled "
        f"with {type(optimizer).__name__}, which would train without privacy."
        " Compile it with optimizer=tf_dp.DPOptimizer(...).")
  loss_fn = losses_lib.per_example_loss_fn(self, flavor)
  variables = self.trainable_variables
  with tf.init_scope():  # Create the DP state eagerly, once.
    optimizer.ensure_built(variables, self)

  def apply_fn(mean_grads):
    with tf.GradientTape() as tape:
      reg = model_checks.weight_regularization_loss(self, flavor)
    if reg is not None:
      reg_grads = per_example.gradients_or_zeros(
          tape.gradient(reg, variables), variables)
      mean_grads = [g + r for g, r in zip(mean_grads, reg_grads)]
    optimizer.apply_private_gradients(mean_grads, variables)

  y_pred, _ = optimizer.dp_engine.step(self, loss_fn, x, y, sample_weight,
                                       apply_fn)
  loss = self.compute_loss(x, y, y_pred, sample_weight)
  if flavor == "keras3":  # Keras 3's compute_loss does not track the loss.
    batch = tf.shape(tf.nest.flatten(x)[0])[0]
    self._loss_tracker.update_state(loss, sample_weight=batch)  # pylint: disable=protected-access
  logs = self.compute_metrics(x, y, y_pred, sample_weight)
  for name, variable in optimizer.dp_engine.dp_metrics.items():
    logs = dict(logs, **{f"dp_{name}": variable.read_value()})
  return logs


def _dp_fit(self, *args, **kwargs):
  """``fit`` with tf_dp's lot-boundary guard among the callbacks."""
  from tf_dp.keras import callbacks as callbacks_lib  # pylint: disable=g-import-not-at-top
  callbacks = kwargs.pop("callbacks", None)
  callbacks = list(callbacks or [])
  callbacks.insert(0, callbacks_lib.LotBoundaryGuard())
  return type(self).fit(self, *args, callbacks=callbacks, **kwargs)


def make_private(model):
  """Converts a Keras model in place so that ``fit`` trains with DP-SGD.

  Works for Sequential, Functional and subclassed models on Keras 3 and
  Keras 2. Compile the returned model with ``tf_dp.DPOptimizer``.

  Privacy contract: see ``tf_dp.DPOptimizer``. The conversion refuses
  models whose per-example gradients would not be per-example
  (BatchNormalization, activity regularisers) and makes Keras 3 dropout draw
  an independent mask per example.

  Args:
    model: A Keras model (built or not).

  Returns:
    The same model object, converted.

  Raises:
    ValueError: for layers that break per-example DP (with the fix).

  Example:
    >>> model = tf_dp.keras.make_private(model)
  """
  flavor = compat.flavor_of(model)
  if model.built and not model.trainable_variables:
    raise ValueError("The model has no trainable variables: there is "
                     "nothing to train privately.")
  model_checks.validate_and_prepare(model, flavor)
  model._tf_dp_flavor = flavor  # pylint: disable=protected-access
  model.train_step = types.MethodType(_dp_train_step, model)
  model.fit = types.MethodType(_dp_fit, model)
  return model


def is_private(model):
  return getattr(model, "_tf_dp_flavor", None) is not None
