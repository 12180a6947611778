"""A graph check that each example's loss depends on that example alone.

The compat.v1 optimizers clip the gradient of each example's loss. That is
each example's contribution only if no example's loss reads another
example: a ``model_fn`` that normalises with the statistics of the batch
(``BatchNormalization`` in training mode, a layer that subtracts the batch
mean) lets one example move every other example's gradient, and the clipped
sum by far more than the clip bound.

The check, built into every step: take the batch's data tensors ``X`` (the
first floating-point tensors computed from the input pipeline: the batch's
features, and the embeddings of its ids), a random half ``S`` of the
examples (a uniformly random ``floor(batch / 2)`` of them, so that neither
``S`` nor its complement is empty) and a random direction ``U`` that is
zero outside the rows of ``S``. The directional derivative of each
example's loss along ``U``,

    J_i = < d loss_i / d X, U > = sum_{j in S} < d loss_i / d x_j, u_j >,

is exactly zero for every example ``i`` outside ``S`` when examples do not
read each other, and almost surely nonzero for an ``i`` whose loss reads an
example of ``S``. ``J`` costs two extra backward passes (the derivative of
``<d(w . loss)/dX, U>`` with respect to the weights ``w``), O(batch), and is
computed on the same forward values as the step (the same dropout masks).
On every step each pair of examples is split by ``S`` with probability
about 1/2 (``floor(b/2) ceil(b/2) / (b (b-1) / 2)`` for a batch of ``b``).

How thoroughly a step is checked: a loss in which every example reads the
batch (a batch statistic: the mean, BatchNormalization) fails every step
of a batch of 2 or more, since ``S`` and its complement are never empty.
A loss in which example ``i`` reads only example ``j`` fails a step when
``j`` is in ``S`` and ``i`` is not: with probability ``floor(b/2)
ceil(b/2) / (b (b-1))``, at least 1/4 and independently on every step, so
such a loss can take steps before it is refused (``k`` steps with
probability at most ``(3/4)^k``). Check a ``model_fn`` that may read
single other examples before training it.

Privacy contract: a step whose ``max_{i not in S} |J_i|`` exceeds
``RELATIVE_TOLERANCE * max_i |J_i|`` fails before any variable changes (the
update depends on the check), with a message naming the cause and the fix.
Tensors whose first dimension is not the batch's are not checked.
"""

from typing import Any, Dict, List

import tensorflow as tf

# Ops whose outputs are the input pipeline's data.
_SOURCE_OP_TYPES = frozenset({
    "IteratorGetNext", "IteratorGetNextSync", "IteratorGetNextAsOptional",
    "OptionalGetValue", "Placeholder", "PlaceholderWithDefault",
})
_SOURCE_OP_PREFIXES = ("QueueDequeue",)
RELATIVE_TOLERANCE = 1e-5

MIXING_MESSAGE = (
    "tf_dp: an example's loss depends on other examples of the batch (for "
    "instance BatchNormalization in training mode, or a layer that "
    "subtracts the batch mean): clipping each example's gradient would not "
    "bound one example's effect on the update, so this step was refused "
    "before any variable changed. Use a normalisation that acts on each "
    "example alone (GroupNormalization or LayerNormalization), or call "
    "BatchNormalization with training=False (frozen statistics).")


def _is_source(op, batch, constants):
  if op.type in _SOURCE_OP_TYPES or op.type.startswith(_SOURCE_OP_PREFIXES):
    return True
  if constants and op.type == "Const" and op.outputs:
    shape = op.outputs[0].shape
    return bool(shape.rank) and batch is not None and shape[0] == batch
  return False


def _is_float(tensor):
  return tensor.dtype.is_floating


def data_tensors(loss):
  """The first floating-point tensors computed from the batch's data.

  Walks the graph back from ``loss``: a tensor is data-dependent if its op
  is an input-pipeline op (or a constant with the batch's first dimension)
  or reads a data-dependent tensor. The returned tensors are the
  floating-point data-dependent ones whose op has no floating-point
  data-dependent input: the features themselves, a cast of integer data,
  an embedding lookup of ids. Only when the graph has no input-pipeline
  op are constants with the batch's first dimension taken as the data (a
  batch written into the graph).
  """
  return (_data_tensors(loss, constants=False)
          or _data_tensors(loss, constants=True))


def _data_tensors(loss, constants):
  batch = loss.shape[0] if loss.shape.rank else None
  dependent: Dict[Any, bool] = {}
  order: List[Any] = []
  stack = [(loss.op, False)]
  while stack:
    op, expanded = stack.pop()
    if op in dependent:
      continue
    if not expanded:
      stack.append((op, True))
      for t in op.inputs:
        if t.op not in dependent:
          stack.append((t.op, False))
      continue
    dependent[op] = _is_source(op, batch, constants) or any(
        dependent.get(t.op, False) for t in op.inputs)
    order.append(op)
  frontier: List[Any] = []
  for op in order:
    if not dependent[op]:
      continue
    if _is_source(op, batch, constants) or not any(
        dependent[t.op] and _is_float(t) for t in op.inputs):
      frontier.extend(t for t in op.outputs
                      if _is_float(t) and t.shape.rank)
  return frontier


def independence_assertion(loss, seed=None):
  """An op that fails when the loss of an example outside a random half
  ``S`` of the batch reads an example of ``S`` (every step, for a batch
  statistic; with probability at least 1/4 per step, for one example that
  reads one other: see the module docstring).

  Args:
    loss: The per-example loss, shape ``[batch]``.
    seed: Optional op-level seed of the random half and direction.

  Returns:
    An assertion op (``tf.no_op`` when the graph has no data tensor with
    the batch's first dimension).
  """
  xs = [x for x in data_tensors(loss)
        if x.shape[0] is None or loss.shape[0] is None
        or x.shape[0] == loss.shape[0]]
  if not xs:
    return tf.no_op()
  rows = tf.shape(loss)[0]
  # S is a uniformly random set of floor(rows / 2) examples: both S and
  # its complement hold an example whenever the batch has two, so no step
  # goes unchecked (independent coin flips leave S empty or full with
  # probability 2^(1 - rows), and such a step checks nothing).
  rank = tf.argsort(tf.argsort(tf.random.uniform([rows], seed=seed)))
  in_half = rank < rows // 2
  weights = tf.ones_like(loss)
  grads = tf.gradients(loss, xs, grad_ys=weights)
  projections = []
  for x, g in zip(xs, grads):
    if g is None:
      continue
    if isinstance(g, tf.IndexedSlices):
      g = tf.convert_to_tensor(g)
    same_rows = tf.equal(tf.shape(x)[0], rows)
    mask = tf.cond(same_rows, lambda: tf.cast(in_half, g.dtype),
                   lambda: tf.zeros(tf.shape(x)[:1], g.dtype))
    mask = tf.reshape(mask, tf.concat(
        [tf.shape(x)[:1], tf.ones([x.shape.rank - 1], tf.int32)], 0))
    direction = tf.random.normal(tf.shape(x), dtype=g.dtype, seed=seed)
    projections.append(tf.reduce_sum(g * tf.stop_gradient(
        direction * mask)))
  if not projections:
    return tf.no_op()
  jvp = tf.gradients(tf.add_n(projections), weights)[0]
  if jvp is None:
    return tf.no_op()
  jvp = tf.abs(tf.cast(jvp, tf.float64))
  outside = tf.reduce_max(tf.where(in_half, tf.zeros_like(jvp), jvp))
  scale = tf.reduce_max(jvp)
  return tf.debugging.Assert(
      tf.logical_not(outside > RELATIVE_TOLERANCE * scale),
      [MIXING_MESSAGE, "max |J_i| outside the half:", outside,
       "max |J_i|:", scale], name="tf_dp_records_independent")
