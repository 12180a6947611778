"""The model side of one-run audits: Dirac canaries in a Keras model, and
each canary's score after training.

``with_dirac_canaries(model, canaries)`` returns a model that computes what
``model`` computes and trains an audit variable beside it: a table of
``m + 1`` scalars (an ``Embedding``, zeros at first). Its inputs are
``(x, canary_id)``, as ``tf_dp.data.mix_canaries`` makes them: a row with
id 0 is an example, trained as ``model`` would be; a row with id ``i + 1``
is canary ``i``, whose gradient is ``gradient_norm`` on entry ``i + 1`` of
the table and zero everywhere else, whatever the loss (a custom gradient;
the row's output is ``model``'s on an input of zeros, and reaches no
weight of ``model``). Each canary is thus a record of the lot whose
gradient is a Dirac (the paper's white-box canary), on a coordinate no
example moves: the table sees the canaries, clipping and the noise only.

Privacy contract: the wrapper adds records (the included canaries, each
counted in ``population_size`` by ``mix_canaries``) and trainable
coordinates (the table, which never feeds the output); it changes neither
what an example contributes to the DP step nor the mechanism: make it
private with ``tf_dp.keras.make_private`` and train it with the run's
``DPOptimizer`` like any model.

``dirac_canary_scores`` reads, after training, minus each canary's table
entry: every optimizer moves a coordinate against its gradient, so an
included canary's entry falls. (Input-space canaries are scored by their
loss: ``tf_dp.keras.audit_canaries``.)
"""

from typing import Any

import numpy as np
import tensorflow as tf

from tf_dp.data.canaries import CanaryKind
from tf_dp.data.canaries import Canaries
from tf_dp.keras import backend

# The name of the audit table's layer in a model from with_dirac_canaries.
AUDIT_TABLE = "tf_dp_dirac_canaries"


def _dirac_gradient(output, audit_entry, is_canary, gradient_norm):
  """``output`` unchanged; backward: the examples' gradient passes, each
  canary row's stops, and its audit entry gets ``gradient_norm``."""

  @tf.custom_gradient
  def dirac(output, audit_entry):
    mask = tf.reshape(is_canary, [-1] + [1] * (output.shape.rank - 1))

    def grad(upstream):
      # The canary's gradient is fixed whatever the loss: a Dirac of norm
      # gradient_norm on its own coordinate of the table.
      return (upstream * (1.0 - mask),
              tf.reshape(gradient_norm * is_canary, tf.shape(audit_entry)))

    return tf.identity(output), grad

  return dirac(output, audit_entry)


class _InjectDirac:
  """The Lambda's function: a callable object (not a closure) so that it
  carries the canaries' gradient norm in a picklable form."""

  def __init__(self, gradient_norm: float) -> None:
    self.gradient_norm = float(gradient_norm)

  def __call__(self, inputs):
    output, audit_entry, canary_id = inputs
    is_canary = tf.cast(tf.reshape(canary_id, [-1]) > 0, output.dtype)
    audit_entry = tf.cast(audit_entry, output.dtype)
    return _dirac_gradient(output, audit_entry, is_canary,
                           tf.constant(self.gradient_norm, output.dtype))


def _check_canaries(canaries, kinds, caller):
  if not isinstance(canaries, Canaries):
    raise TypeError(f"canaries must be tf_dp.data.Canaries; got "
                    f"{type(canaries).__name__}.")
  if canaries.kind not in kinds:
    raise ValueError(
        f"{caller} takes canaries of kind {[str(k) for k in kinds]}; got "
        f"{str(canaries.kind)!r} canaries.")


def with_dirac_canaries(model: Any, canaries: Canaries) -> Any:
  """``model`` with an audit table for ``canaries`` (see the module's doc).

  Args:
    model: a built Keras model with one input and one output (a
      Sequential or Functional model on a ``keras.Input``), not yet made
      private.
    canaries: ``tf_dp.data.dirac_canaries(m)``.

  Returns:
    A Keras model (of ``model``'s flavour) on inputs ``(x, canary_id)``
    that shares ``model``'s layers and weights: make it private, compile
    it and fit it on ``tf_dp.data.mix_canaries(x, y, canaries)``;
    ``model`` is then trained (save ``model``: the audit's wrapper holds a
    Lambda layer, which Keras files do not keep safely).

  Raises:
    ValueError: if ``model`` has no single input and output, or
      ``canaries`` are not Dirac canaries.

  Example:
    >>> canaries = tf_dp.data.dirac_canaries(1000)
    >>> audited = tf_dp.keras.make_private(
    ...     tf_dp.keras.with_dirac_canaries(model, canaries))
  """
  _check_canaries(canaries, (CanaryKind.DIRAC,), "with_dirac_canaries")
  inputs = getattr(model, "inputs", None)
  outputs = getattr(model, "outputs", None)
  if not inputs or len(inputs) != 1 or not outputs or len(outputs) != 1:
    raise ValueError(
        f"with_dirac_canaries needs a model with one input and one output "
        f"(a Sequential or Functional model built on keras.Input); model "
        f"{getattr(model, 'name', model)!r} has "
        f"{len(inputs or [])} inputs and {len(outputs or [])} outputs.")
  keras = backend.for_object(model).module()
  features = keras.Input(shape=tuple(inputs[0].shape[1:]),
                         dtype=inputs[0].dtype, name="x")
  canary_id = keras.Input(shape=(), dtype="int32", name="canary_id")
  table = keras.layers.Embedding(canaries.num_canaries + 1, 1,
                                 embeddings_initializer="zeros",
                                 name=AUDIT_TABLE)
  assert canaries.gradient_norm is not None
  output = keras.layers.Lambda(_InjectDirac(canaries.gradient_norm),
                               name="tf_dp_dirac_gradients")(
                                   [model(features), table(canary_id),
                                    canary_id])
  return keras.Model([features, canary_id], output,
                     name=f"{model.name}_with_dirac_canaries")


def has_dirac_canaries(model: Any) -> bool:
  """Whether ``model`` came from ``with_dirac_canaries`` (has its table)."""
  return any(layer.name == AUDIT_TABLE
             for layer in backend.for_object(model).all_layers(model))


def _audit_table(model):
  for layer in backend.for_object(model).all_layers(model):
    if layer.name == AUDIT_TABLE:
      return layer
  raise ValueError(
      f"model {model.name!r} has no Dirac canaries: score Dirac canaries on "
      f"the model tf_dp.keras.with_dirac_canaries returned (and trained).")


def dirac_canary_scores(model: Any, canaries: Canaries) -> np.ndarray:
  """Minus each Dirac canary's audit-table entry in a trained model.

  Args:
    model: the model ``with_dirac_canaries`` returned, trained.
    canaries: the Dirac canaries it was built with.

  Returns:
    float64 ``[m]``, higher meaning "included".
  """
  _check_canaries(canaries, (CanaryKind.DIRAC,), "dirac_canary_scores")
  table = np.asarray(_audit_table(model).get_weights()[0], np.float64)
  if table.shape != (canaries.num_canaries + 1, 1):
    raise ValueError(
        f"The audit table of model {model.name!r} holds {table.shape[0] - 1} "
        f"canaries, not the {canaries.num_canaries} given: score the "
        f"canaries the model was built with.")
  return -table[1:, 0]
