"""A privacy self-check of the user's own model on a few real examples.

Per-example clipping bounds what one example can do only if each example's
gradient depends on that example alone. Keras layers that break this are
refused by name (BatchNormalization), but a custom layer with a batch
statistic, or a subclass nobody listed, would pass unseen. ``check_privacy``
runs the model on a few examples, changes one of them, and verifies:

1. every other example's gradient (from the batched forward and backward
   pass, as training computes it) is unchanged; if not, the first layer
   whose output for another example changed is named;
2. the fast clipped sum (ghost norms and per-layer rules) equals the sum
   of each example's gradient from that batched pass, clipped, with a clip
   that binds and one that does not.

Both compare like with like: every run is a batched pass that starts from
the same random state (global seed, Keras seed generators, moving
statistics), so dropout masks and augmentations are the same draws in the
runs compared, and only another example can change an example's result.
Afterwards the model's non-trainable variables and random states are as
they were. It releases nothing: it only raises or returns.
"""

from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.python.framework import random_seed  # pylint: disable=g-direct-tensorflow-import

from tf_dp.dp_query.gaussian_query import GaussianSumQuery
from tf_dp.errors import PrivacyCheckError
from tf_dp.keras import backend
from tf_dp.keras import losses as losses_lib
from tf_dp.keras import model_checks
from tf_dp.keras import per_example
from tf_dp.keras.fast import clipped_sum as fast_clipping
from tf_dp.keras.fast import taps as taps_lib

_SEED = 20181029
_RTOL = 1e-4  # float32 sums of a few gradients, two computation orders.
# A model computing in bfloat16 (8 significant bits): the reference rounds
# each per-example gradient to bfloat16, the fast path forms it in float32.
# A wrong rule is off by O(1), far above this.
_RTOL_HALF = 3e-2


def _fast_path_rtol(model):
  dtypes = {str(getattr(layer, "compute_dtype", "float32"))
            for layer in model_checks.all_layers(model)}
  return _RTOL_HALF if dtypes & {"bfloat16", "float16"} else _RTOL


def _gather_rows(t, rows):
  if t is None:
    return None
  if isinstance(t, tf.SparseTensor):
    return tf.sparse.from_dense(tf.gather(tf.sparse.to_dense(t), rows))
  if isinstance(t, tf.RaggedTensor):
    return tf.gather(t, rows)
  return tf.gather(tf.convert_to_tensor(t), rows)


def _rows(structure, rows):
  return tf.nest.map_structure(lambda t: _gather_rows(t, rows), structure)


def _dense(t):
  """A layer output as a dense array (ragged rows padded with zeros)."""
  if isinstance(t, tf.RaggedTensor):
    t = t.to_tensor()
  elif isinstance(t, tf.SparseTensor):
    t = tf.sparse.to_dense(t)
  return np.asarray(tf.convert_to_tensor(t))


def _draws_repeater(model):
  """A function ``repeat(fn)`` that runs ``fn`` with the random draws of the
  first run, and ``restore()`` that leaves the model as it was found.

  Every run starts from the model's non-trainable variables as they are now
  (moving statistics, Keras 3 ``SeedGenerator`` states), from its layers'
  other random states (``random_state_restorer`` of the adapter) and from
  a fixed global seed: a batched pass draws the same dropout masks and
  augmentations in every run of the same shapes. The global seed is put
  back after each run.
  """
  keras_backend = backend.for_object(model)
  restorers = [r for r in (keras_backend.random_state_restorer(layer)
                           for layer in [model] + model_checks.all_layers(
                               model)) if r is not None]
  variables = list(model.non_trainable_variables)
  saved = [tf.identity(v) for v in variables]

  def restore():
    for variable, value in zip(variables, saved):
      variable.assign(value)
    for restorer in restorers:
      restorer()

  def repeat(fn):
    restore()
    previous = random_seed.get_seed(None)[0]
    tf.random.set_seed(_SEED)
    try:
      return fn()
    finally:
      tf.random.set_seed(previous)

  return repeat, restore


def _per_example_grads_and_outputs(model, loss_fn, x, y, w):
  """Jacobian of the per-example losses from one batched pass, and every
  layer's output, in call order."""
  layers = [l for l in model_checks.all_layers(model)
            if not fast_clipping.is_model(l)]
  variables = model.trainable_variables
  with taps_lib.TapSession(layers, {}) as session:
    with tf.GradientTape(persistent=True) as tape:
      y_pred = model(x, training=True)
      losses = loss_fn(y, y_pred, w)
  # One example's gradient at a time: for a few examples, a loop of eager
  # gradients with a one-hot output gradient (no function to trace).
  m = int(losses.shape[0])
  grads = [tape.gradient(losses, variables,
                         output_gradients=tf.one_hot(i, m, dtype=losses.dtype),
                         unconnected_gradients=tf.UnconnectedGradients.ZERO)
           for i in range(m)]
  jac = [tf.stack([tf.convert_to_tensor(g[k]) for g in grads])
         for k in range(len(variables))]
  outputs = [(session.taps[k].layer, session.taps[k].output)
             for k in session.taps]
  return jac, outputs


def _changed(a, b, rows):
  a, b = _dense(a), _dense(b)
  if a.shape != b.shape and a.ndim == b.ndim:
    # Ragged outputs padded to different lengths: pad both alike.
    shape = np.maximum(a.shape, b.shape)
    a, b = (np.pad(t, [(0, s - d) for s, d in zip(shape, t.shape)])
            for t in (a, b))
  a, b = a[rows], b[rows]
  scale = max(np.abs(a).max(initial=0.0), np.abs(b).max(initial=0.0), 1e-12)
  return np.abs(a - b).max(initial=0.0) > _RTOL * scale


def _check_independence(model, run, run_n, m):
  """Part 1: ``run`` and ``run_n`` are ``(jacobian, outputs)`` of the batch
  and of its neighbour, with the same random draws."""
  (jac, outs), (jac_n, outs_n) = run, run_n
  others = list(range(1, m))
  if not any(_changed(a, b, others) for a, b in zip(jac, jac_n)):
    return
  for (layer, out), (_, out_n) in zip(outs, outs_n):
    flat, flat_n = tf.nest.flatten(out), tf.nest.flatten(out_n)
    if any(_changed(a, b, others) for a, b in zip(flat, flat_n)
           if tf.is_tensor(a)):
      raise PrivacyCheckError(
          f"Layer {layer.name!r} ({type(layer).__name__}) mixes examples: "
          f"its output for one example changed when another example "
          f"changed, so per-example clipping would not bound what one "
          f"example contributes. Replace it with a layer that treats "
          f"each example on its own (for batch statistics: "
          f"LayerNormalization, GroupNormalization or "
          f"tf_dp.keras.layers.DPBatchNormalization).")
  names = [v.name for v, a, b in zip(model.trainable_variables, jac, jac_n)
           if _changed(a, b, others)]
  raise PrivacyCheckError(
      f"The gradients of variables {names} for one example changed when "
      f"another example changed (a custom gradient or loss that mixes "
      f"examples): per-example clipping would not bound what one example "
      f"contributes.")


def _variable_descriptions(model):
  """Each trainable variable's full path (``model/layer/name`` on Keras 3,
  its unique name on Keras 2) and the layer that owns it, by id."""
  owners = {id(v): unit for unit in fast_clipping.trainable_units(model)
            for v in unit.trainable_variables}
  out = {}
  for v in model.trainable_variables:
    text = getattr(v, "path", None) or v.name
    owner = owners.get(id(v))
    if owner is not None:
      text += f" (layer {owner.name!r}, {type(owner).__name__})"
    out[id(v)] = text
  return out


def _check_fast_path(model, loss_fn, x, y, w, jac, repeat):
  """Part 2: the fast clipped sum against the clipped sum of the rows of
  ``jac`` (each example's gradient from the batched pass of part 1, with
  the same random draws as the fast path's own batched pass); skipped
  where the fast path is not used."""
  variables = model.trainable_variables
  if per_example.composite_inputs_reason(x) or (
      fast_clipping.fast_path_unavailable_reason(
          model, GaussianSumQuery(1.0, 0.0)) is not None):
    return
  rows = [np.asarray(g, np.float64) for g in jac]
  norms = np.sqrt(sum(np.sum(np.square(np.reshape(g, [len(g), -1])), 1)
                      for g in rows))
  median = float(np.median(norms)) or 1.0
  described = _variable_descriptions(model)
  for clip in (median, 1e9):
    query = GaussianSumQuery(clip, 0.0)
    # Each example's gradient scaled to norm at most ``clip``, summed: in
    # float64 from the jacobian's rows, independently of the query's code.
    # (clip / max(norm, clip): exactly 1 up to the clip, never a division
    # by a zero norm.)
    scales = clip / np.maximum(norms, clip)
    reference = [np.tensordot(scales, g, 1) for g in rows]
    try:
      fast = repeat(lambda q=query, c=clip: fast_clipping.clipped_batch_sum(
          model, loss_fn, x, y, w, q, tf.constant(c, tf.float32))[0])
    except fast_clipping.FastPathUnavailable:
      return
    rtol = _fast_path_rtol(model)
    # Rounding is relative to the whole clipped sum: a gradient that is 0
    # in exact arithmetic (a key bias under softmax) comes out ~1e-8.
    atol = rtol * max([np.abs(a).max(initial=0.0) for a in reference] +
                      [1e-6])
    for v, a, b in zip(variables, reference, fast):
      b = np.asarray(b, np.float64)
      if not np.allclose(a, b, rtol=rtol, atol=atol):
        raise PrivacyCheckError(
            f"The fast clipped sum of variable {described[id(v)]} differs "
            f"from the per-example reference (max difference "
            f"{np.abs(a - b).max():.3g}): the fast rule for its layer does "
            f"not compute per-example gradients for this model. Train with "
            f"DPOptimizer(..., per_example_method='vectorized').")


def _replacement(x, batch, m):
  """The row that replaces example 0 in the neighbour: the first of rows
  ``m, ..., batch - 1, 1, ..., m - 1`` whose inputs differ from example
  0's (a row with equal inputs would leave the batch as it was, and a
  layer that mixes examples unseen)."""
  others = list(range(m, batch)) + list(range(1, m))
  keys = per_example.row_keys(x, [0] + others)
  for row, key in zip(others, keys[1:]):
    if key != keys[0]:
      return row
  raise ValueError(
      "check_privacy needs a batch of at least 2 examples with different "
      f"inputs; all {batch} examples have the inputs of the first.")


def check_privacy(model: Any, x: Any, y: Any, sample_weight: Any = None,
                  num_examples: int = 4) -> None:
  """Verifies on a few examples that ``model`` trains privately with tf_dp.

  Privacy contract: checks that (1) each example's gradient, computed from
  a batched pass as in training, does not change when another example
  changes, and (2) tf_dp's fast clipped sum equals the per-example
  reference on these examples. It releases nothing; it raises or returns.

  Args:
    model: A Keras model converted with ``tf_dp.keras.make_private`` and
      compiled (its loss is used).
    x, y: A batch (arrays or tensors, nests allowed) of at least 2 examples
      with different inputs; the first ``num_examples`` are used (in the
      neighbour, the first of them is replaced by an example whose inputs
      differ from its own).
    sample_weight: Optional per-example weights.
    num_examples: How many examples to use (2 or more).

  Raises:
    PrivacyCheckError: naming the layer (or variables) that mixes examples,
      or the variable whose fast clipped sum is wrong.

  Example:
    >>> tf_dp.keras.check_privacy(model, x_train[:8], y_train[:8])
  """
  loss_fn = losses_lib.per_example_loss_fn(model)
  batch = int(per_example.batch_size(x))
  m = min(int(num_examples), batch)
  if m < 2:
    raise ValueError("check_privacy needs a batch of at least 2 examples; "
                     f"got {batch}.")
  rows = list(range(m))
  # The neighbour: example 0 replaced by another example of the batch.
  neighbour_rows = [_replacement(x, batch, m)] + rows[1:]
  xn, yn = _rows(x, neighbour_rows), _rows(y, neighbour_rows)
  x, y = _rows(x, rows), _rows(y, rows)
  w = (tf.ones([m]) if sample_weight is None
       else tf.cast(_rows(sample_weight, rows), tf.float32))
  if not model.built:
    model(x)
  repeat, restore = _draws_repeater(model)
  try:
    run = repeat(lambda: _per_example_grads_and_outputs(model, loss_fn, x, y,
                                                        w))
    run_n = repeat(lambda: _per_example_grads_and_outputs(model, loss_fn, xn,
                                                          yn, w))
    _check_independence(model, run, run_n, m)
    _check_fast_path(model, loss_fn, x, y, w, run[0], repeat)
  finally:
    restore()
