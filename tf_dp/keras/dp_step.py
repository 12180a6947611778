"""The DP step of a model converted by ``make_private``, shared by ``fit``
(its ``train_step``) and custom training loops (``DPOptimizer.private_step``).
"""

import types
from typing import Any, Callable, List, Optional, Tuple

import tensorflow as tf

from tf_dp.dp_query import eager_variables
from tf_dp.keras import backend
from tf_dp.keras import model_checks
from tf_dp.keras import per_example


def converted_backend(model: Any) -> Optional[types.ModuleType]:
  """The Keras adapter (``tf_dp.keras.backend``) of a model converted by
  ``make_private``, else None."""
  flavor = getattr(model, "_tf_dp_flavor", None)
  return None if flavor is None else backend.for_flavor(flavor)


def _check_dense_labels(y: Any, sample_weight: Any) -> None:
  """Ragged or sparse inputs are fine (a per-example loop computes them);
  labels and weights must be dense."""
  for t in tf.nest.flatten((y, sample_weight)):
    if per_example.is_composite(t):
      raise ValueError(
          f"tf_dp does not support {type(t).__name__} labels or sample "
          f"weights (ragged or sparse inputs are supported). Pad the labels "
          f"(e.g. labels.to_tensor()) and give the padding sample weight 0, "
          f"or use one label per example.")


def _sum_of_present(grad: Optional[tf.Tensor],
                    penalty_grad: Optional[tf.Tensor]) -> Optional[tf.Tensor]:
  """``grad + penalty_grad``, either of which may be None (no gradient, as
  Keras's tape gives for the sum of the loss and the penalties: None only
  if both are)."""
  if penalty_grad is None:
    return grad
  penalty_grad = tf.convert_to_tensor(penalty_grad)
  return penalty_grad if grad is None else grad + penalty_grad


def private_step(
    model: Any, optimizer: Any, loss_fn: Callable[..., Any], x: Any, y: Any,
    sample_weight: Any) -> Tuple[Any, tf.Tensor, Optional[tf.Tensor]]:
  """One DP step of a converted model: the body of ``fit``'s train step and
  of ``DPOptimizer.private_step``.

  Clips each record's gradient of ``loss_fn`` (``f(y, y_pred, w) ->
  [batch]`` per-example losses), adds the batch to the lot, and on the lot's
  last batch noises once, records one ledger sample and applies the mean
  plus the gradient of the data-independent penalties (regularisers,
  ``add_loss`` terms on a public input). Returns ``(y_pred, losses,
  penalty)``: the per-example losses, and the ``add_loss`` penalty (None
  unless the model adds losses).
  """
  _check_dense_labels(y, sample_weight)
  if not model.built or not model.trainable_variables:
    raise ValueError(
        f"Model {model.name!r} has no trainable variables yet: it is not "
        f"built. Give it an Input layer, or call it once on a batch "
        f"(`model(x)`) before the first DP step.")
  variables = model.trainable_variables
  with eager_variables.creation_scope():
    optimizer.ensure_built(variables, model)  # Eagerly, once.
  penalty, checked = None, []
  if model_checks.adds_losses(model, x):
    # add_loss terms: evaluated on a public input, outside the clipped sum.
    # The whole step waits for their check that they do not depend on the
    # data (``checked``): a failed check must stop the step before any
    # gradient is applied or any lot is recorded, also when no variable
    # has a gradient of the penalty (then nothing else would wait for it).
    penalty, penalty_grads = model_checks.public_penalty(model, x)
    checked = [penalty]

  def apply_fn(mean_grads: List[Optional[tf.Tensor]]) -> None:
    extra: Optional[List[Optional[tf.Tensor]]]
    if penalty is not None:
      extra = penalty_grads
    else:
      with tf.GradientTape() as tape:
        reg = model_checks.weight_regularization_loss(model)
      extra = None if reg is None else tape.gradient(reg, variables)
    if extra is not None:
      mean_grads = [_sum_of_present(g, r) for g, r in zip(mean_grads, extra)]
    optimizer.apply_private_gradients(mean_grads, variables)

  with tf.control_dependencies(checked):
    y_pred, losses = optimizer.dp_engine.step(model, loss_fn, x, y,
                                              sample_weight, apply_fn)
  return y_pred, losses, penalty
