"""``check_privacy``: what the privacy gate decides for a model, ahead of
training.

The DP step runs the privacy gate (``tf_dp.keras.privacy_gate``) itself,
every time it is traced; ``check_privacy`` traces the same computation on a
batch's signature (it never runs it, changes no variable and releases
nothing) and says which path the step will take and why, or raises the
refusal the first step would raise.
"""

from typing import Any, NamedTuple, Optional

import tensorflow as tf

from tf_dp.dp_query.gaussian_query import GaussianSumQuery
from tf_dp.keras import losses as losses_lib
from tf_dp.keras import per_example
from tf_dp.keras import privacy_gate
from tf_dp.keras.fast import clipped_sum as fast_clipping


class GateVerdict(NamedTuple):
  """The path the DP step takes for a model and a batch signature.

  ``path`` is ``"fast"`` (ghost norms and per-layer rules, proven to keep
  examples apart) or ``"exact"`` (each record evaluated alone under
  ``tf.vectorized_map``); ``reason`` says why the fast path is not used
  (None on the fast path).
  """
  path: str
  reason: Optional[str]


def _spec(t: Any) -> Optional[tf.TensorSpec]:
  if t is None:
    return None
  if isinstance(t, (tf.RaggedTensor, tf.SparseTensor)):
    return tf.type_spec_from_value(t)
  t = tf.convert_to_tensor(t)
  return tf.TensorSpec([None] + t.shape.as_list()[1:], t.dtype)


def check_privacy(model: Any, x: Any, y: Any,
                  sample_weight: Any = None) -> GateVerdict:
  """Runs the privacy gate on ``model`` for batches shaped like ``x``.

  Privacy contract: traces (never runs) the DP step's forward pass, loss
  and backward pass for a batch of unknown size shaped like ``x``, and
  applies the gate's rules to that graph: the fast path only where every
  tensor its rules read is proven to hold rows by example; the exact path
  otherwise; a refusal for a forward operation that provably combines
  examples or a data-dependent write to a variable. It releases nothing.

  Args:
    model: A Keras model converted with ``tf_dp.keras.make_private`` and
      compiled with a loss.
    x: A batch's inputs (arrays or tensors, nests allowed); only their
      shapes and dtypes are used.
    y: The batch's labels (shapes and dtypes only).
    sample_weight: Optional per-example weights (shapes only).

  Returns:
    A ``GateVerdict``: the path and, for the exact path, the reason.

  Raises:
    UnsupportedModelError: what the first DP step would raise.

  Example:
    >>> verdict = tf_dp.keras.check_privacy(model, x_train[:8], y_train[:8])
    >>> verdict.path
    'fast'
  """
  loss_fn = losses_lib.per_example_loss_fn(model)
  if not model.built:
    model(x)
  specs = tf.nest.map_structure(_spec, (x, y, sample_weight))
  reason = per_example.composite_inputs_reason(x)
  query = GaussianSumQuery(1.0, 0.0)
  params = query.derive_sample_params(query.initial_global_state())
  if reason is None:
    reason = fast_clipping.fast_path_unavailable_reason(model, query)
  if reason is None:
    def fast(x: Any, y: Any, w: Any) -> Any:
      return fast_clipping.clipped_batch_sum(model, loss_fn, x, y, w, query,
                                             params)[0]
    try:
      tf.function(fast, autograph=False).get_concrete_function(*specs)
      return GateVerdict("fast", None)
    except fast_clipping.FastPathUnavailable as e:
      reason = str(e)
  privacy_gate.check_exact_step(model, loss_fn, *specs)
  return GateVerdict("exact", reason)
