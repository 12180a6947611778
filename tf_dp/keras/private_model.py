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
import warnings
from typing import Any, Dict, Tuple, cast

import tensorflow as tf

from tf_dp.data import lots as data_lots
from tf_dp.errors import PrivacyError
from tf_dp.errors import UnsupportedModelError
from tf_dp.keras import backend
from tf_dp.keras import dp_engine
from tf_dp.keras import dp_step
from tf_dp.keras import first_batch
from tf_dp.keras import fit_arguments
from tf_dp.keras import fit_correlated_noise
from tf_dp.keras import fit_distribution
from tf_dp.keras import fit_order
from tf_dp.keras import fit_sampling
from tf_dp.keras import losses as losses_lib
from tf_dp.keras import model_checks
from tf_dp.keras import optimizer_base
from tf_dp.keras import written_metrics
from tf_dp.sampling import Sampling


def _dp_train_step(self, data: Any) -> Dict[str, Any]:
  """The DP-SGD training step installed by ``make_private``."""
  keras_backend = cast(types.ModuleType, dp_step.converted_backend(self))
  x, y, sample_weight = keras_backend.unpack_x_y_sample_weight(data)
  optimizer = self.optimizer
  inner = getattr(optimizer, "inner_optimizer", None)
  if inner is not None and optimizer_base.is_dp_optimizer(inner):
    raise UnsupportedModelError(
        model_checks.MIXED_PRECISION_ERROR.format(
            name=self.name, compute="float16", policy="mixed_float16") +
        f" (Keras wrapped the DPOptimizer in a {type(optimizer).__name__}.)")
  if not optimizer_base.is_dp_optimizer(optimizer):
    raise PrivacyError(
        "This model was converted with tf_dp.keras.make_private but compiled "
        f"with {type(optimizer).__name__}, which would train without privacy."
        " Compile it with optimizer=tf_dp.DPOptimizer(...).")
  loss_fn = losses_lib.per_example_loss_fn(self)
  y_pred, _, penalty = dp_step.private_step(self, optimizer, loss_fn, x, y,
                                            sample_weight)
  x, y, y_pred, sample_weight = _drawn_rows(optimizer, x, y, y_pred,
                                            sample_weight)
  # The loss Keras reports, with ``penalty`` standing for ``model.losses``
  # when the model adds losses.
  keras_backend.reported_loss(self, x, y, y_pred, sample_weight, penalty)
  logs = dict(self.compute_metrics(x, y, y_pred, sample_weight),
              **{f"dp_{name}": variable.read_value() for name, variable
                 in optimizer.dp_engine.dp_metrics.items()})
  if fit_distribution.strategy_workers(self) > 1:
    logs = keras_backend.logs_across_workers(logs)
  return logs


def _drawn_rows(optimizer: Any, x: Any, y: Any, y_pred: Any,
                sample_weight: Any) -> Tuple[Any, ...]:
  """``(x, y, y_pred, sample_weight)`` of the examples a Poisson lot drew,
  without its padding rows (weight 0), for the loss and metrics Keras
  reports: Keras's unweighted metrics (``metrics=["accuracy"]``) would
  count the padding. Other samplings: unchanged."""
  if (optimizer.dp_engine.config.sampling is not Sampling.POISSON
      or sample_weight is None):
    return x, y, y_pred, sample_weight
  weight = tf.reshape(tf.nest.flatten(sample_weight)[0], [-1])
  rows = tf.where(weight > 0)[:, 0]
  take = lambda t: None if t is None else tf.gather(t, rows)
  return tuple(tf.nest.map_structure(take, part)
               for part in (x, y, y_pred, sample_weight))


def _dp_train_on_batch(self, *args: Any, **kwargs: Any) -> Any:
  """``train_on_batch``, refused under a sampling that one batch cannot
  show (``tf_dp.keras.fit_sampling.check_sampling_of_fit_input``)."""
  if optimizer_base.is_dp_optimizer(getattr(self, "optimizer", None)):
    fit_sampling.checked_arguments(self, "train_on_batch", args, kwargs)
    fit_sampling.check_train_on_batch_lot(self.optimizer.dp_engine.config)
    fit_correlated_noise.check_step_outside_fit(self.optimizer.dp_engine,
                                        "train_on_batch")
    # Keras reuses the step traced by an earlier fit, whose n (inferred
    # from that fit's arrays) is no longer known: check it here.
    self.optimizer.dp_engine.require_population_size()
  return type(self).train_on_batch(self, *args, **kwargs)


def _class_weights_into_lots(
    args: Tuple[Any, ...],
    kwargs: Dict[str, Any]) -> Tuple[Tuple[Any, ...], Dict[str, Any]]:
  """``fit``'s arguments with ``class_weight`` folded into the weights of a
  sampler's lots (Keras refuses class weights beside sample weights, and
  a Poisson lot's weights mark which rows were drawn)."""
  x, _ = first_batch.fit_input(args, kwargs)
  class_weight = kwargs.get("class_weight")
  if not class_weight or not isinstance(x, tf.data.Dataset) or (
      data_lots.declared_sampling(x) is None):
    return args, kwargs
  spec = x.element_spec
  if not isinstance(spec, tuple) or len(spec) != 3:
    return args, kwargs  # (x, y) lots: Keras weights the classes itself.
  return first_batch.with_fit_input(
      args, dict(kwargs, class_weight=None),
      data_lots.with_class_weights(x, class_weight))


JIT_COMPILE_WARNING = (
    "jit_compile=True: XLA compiles tf_dp's DP step again for every batch: "
    "TensorFlow makes the inputs of an XLA cluster that differentiates "
    "through tf.vectorized_map (which evaluates each example's loss alone) "
    "compile-time constants, so every new batch is a new program (measured "
    "on a 2-core CPU: 21 s per step, against 14 ms per step without XLA). "
    "Privacy is unaffected; for speed, compile with jit_compile=False.")


def _dp_fit(self, *args: Any, **kwargs: Any) -> Any:
  """``fit`` with tf_dp's lot-boundary guard; refuses an
  input whose lots are not the declared sampling's; takes
  ``population_size`` from the arrays when it was not given, for this fit
  only, and refuses (before any step) an input of unknown length when it
  was not."""
  from tf_dp.keras import callbacks as callbacks_lib  # pylint: disable=g-import-not-at-top
  optimizer: Any = getattr(self, "optimizer", None)
  engine: Any = (optimizer.dp_engine
            if optimizer_base.is_dp_optimizer(optimizer) else None)
  inferred = False
  if engine is not None:
    bound = fit_sampling.checked_arguments(self, "fit", args, kwargs)
    examples = fit_arguments.training_examples(bound)
    engine.expected_lot_examples = fit_arguments.expected_lot_examples(
        bound, examples, engine.config.gradient_accumulation_steps)
    fit_sampling.check_lots_within_passes(engine.config, bound, examples)
    fit_sampling.warn_if_shuffle_is_seeded(engine.config, bound, examples)
    fit_order.check_order(engine.config, bound, backend.for_object(self),
                          engine.config.population_size)
    fit_correlated_noise.check_correlated_noise_fit(engine, bound, examples)
    if getattr(self, "jit_compile", False) is True:
      warnings.warn(JIT_COMPILE_WARNING, stacklevel=2)
    if examples is not None:
      inferred = engine.infer_population_size(examples)
    engine.require_population_size()
  try:
    args, kwargs = _class_weights_into_lots(args, kwargs)
    first_x, args, kwargs = first_batch.for_fit(self, args, kwargs)
    if first_x is not None:
      # A model not built yet (a Sequential without Input, a subclassed
      # model) is built on a few examples of what fit will train on.
      self(first_x, training=False)
    if engine is not None and self.built and self.trainable_variables:
      # The DP state exists before Keras traces the train step: a trace
      # that creates variables is traced twice.
      with self.distribute_strategy.scope():
        optimizer.ensure_built(self.trainable_variables, self)
    callbacks = callbacks_lib.with_tf_dp_callbacks(kwargs.pop("callbacks",
                                                             None))
    if fit_distribution.strategy_workers(self) > 1:
      backend.for_object(self).prepare_fit_across_workers(self)
    if engine is not None:
      args, kwargs = fit_distribution.redrawn_per_worker(self, args, kwargs)
    return type(self).fit(self, *args, callbacks=callbacks, **kwargs)
  finally:
    if inferred:  # That n was this fit's only.
      engine.forget_inferred_population_size()
    if engine is not None:  # Its passes end with it.
      fit_correlated_noise.end_correlated_noise_fit(engine)


def make_private(model: Any) -> Any:
  """Converts a Keras model in place so that ``fit`` trains with DP-SGD.

  Works for Sequential, Functional and subclassed models on Keras 3 and
  Keras 2. Compile the returned model with ``tf_dp.DPOptimizer``.

  Privacy contract: see ``tf_dp.DPOptimizer``. The conversion refuses
  models whose per-example gradients would not be per-example
  (BatchNormalization, activity regularisers) and makes Keras 3 dropout draw
  an independent mask per example. Every time the DP step is traced, the
  privacy gate (``tf_dp.keras.privacy_gate``) proves from the traced graph
  what the step relies on: the fast path only where every tensor its rules
  read holds rows by example, the exact path otherwise; a layer that
  provably combines examples, or writes data to a variable, is refused
  before any update. ``fit`` on arrays, tensors or unmarked datasets trains only under
  ``sampling="shuffled"`` (what Keras does with them); under
  ``"fixed_size"`` or ``"poisson"`` it trains only on a dataset marked with
  that sampling, and is otherwise refused before any step
  (``tf_dp.keras.fit_sampling.check_sampling_of_fit_input``). No file
  written from the model holds Keras's un-noised training metric totals
  (``tf_dp.keras.written_metrics``).

  Args:
    model: A Keras model (built or not).

  Returns:
    The same model object, converted.

  Raises:
    ValueError: for layers that break per-example DP (with the fix).
    RuntimeError: with TensorFlow 2 behaviour off
      (``tf.compat.v1.disable_v2_behavior()``: Keras's graph-mode loop
      would never call the DP step).

  Example:
    >>> model = tf_dp.keras.make_private(model)
  """
  dp_engine.require_eager_execution("tf_dp.keras.make_private")
  keras_backend = backend.for_object(model)
  if model.built and not model.trainable_variables:
    raise ValueError("The model has no trainable variables: there is "
                     "nothing to train privately.")
  model_checks.validate_and_prepare(model)
  model._tf_dp_flavor = keras_backend.NAME  # pylint: disable=protected-access
  model.train_step = types.MethodType(_dp_train_step, model)
  model.fit = types.MethodType(_dp_fit, model)
  model.train_on_batch = types.MethodType(_dp_train_on_batch, model)
  written_metrics.never_write_metric_totals(model)
  # A fit before the conversion traced the non-private step: trace anew.
  if getattr(model, "train_function", None) is not None:
    model.train_function = None
  return model


def is_private(model: Any) -> bool:
  """Whether ``model`` was converted by ``make_private``."""
  return dp_step.converted_backend(model) is not None
