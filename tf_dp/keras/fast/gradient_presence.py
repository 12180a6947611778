"""Which trainable variables have a gradient, and whether each rule gives
them one: structural facts of the traced step, decided at trace time.

Keras leaves a variable without a gradient (``tape.gradient`` gives None:
the loss does not depend on it) out of the update: its value, and its
optimizer slots, stay as they are. The fast path must do the same, and
must never give a variable that has a gradient an update that is zero for
every record.

``without_gradient``: a variable has a gradient when some tapped call
reads it and that call's output reaches the loss (its output gradient is
not None). Every read of a trainable variable happens inside a call of the
layer holding it (``clipped_sum._check_taps_cover``), so this is the tape's
own criterion, per call: an untied ``ReversibleEmbedding`` under a
classification head is called forward only, and its
``reverse_embeddings``, read by no call, has none. Its norms and sums are
then zeros, whatever the rule computes for it (a rule's state without any
position must not turn a record's norm into NaN, which would drop the
record and so every other variable's gradient too), and the step passes
None for it to the optimizer. (A variable that a call reaching the loss
reads without differentiating through it, which the tape would also give
None, counts as having a gradient: the rule's zeros are applied, or the
check below refuses the rule.)

``check_sums_follow_calls``: for a variable that has a gradient, its
clipped sum must depend on the output gradient of every call that reads
it; otherwise the rule cannot account for that call's part of the
gradient and the fast path is unavailable (an exact path, or a clear
error, instead of an update that is silently zero). A graph walk at trace
time: no op is added to the step and nothing is synchronised.

Privacy does not depend on either: leaving out a variable whose gradient
is structurally zero for every record changes no record's contribution,
and a refused rule is never used.
"""

from typing import Any, Dict, FrozenSet, Iterable, List, Optional, Sequence, Set

import tensorflow as tf

from tf_dp.keras.fast import linear


def variable_key(v: Any) -> int:
  """The identity of a trainable variable as a tape sees it: a Keras 3
  variable and the resource variable under it share the handle."""
  return id(getattr(v, "handle", v))


def _variable_name(v: Any) -> str:
  return getattr(v, "path", None) or v.name


def _reaches_loss(out_grad: Any) -> bool:
  """Whether a call's output gradient (a nest, None where an output does
  not reach the loss) is not None anywhere."""
  return any(g is not None for g in tf.nest.flatten(out_grad))


def without_gradient(variables: Sequence, unit_taps: Sequence[Sequence],
                     out_grads: Sequence[Sequence]) -> FrozenSet[int]:
  """Indices into ``variables`` (the model's trainable variables) of those
  that no call reaching the loss reads: their gradient is None.

  Args:
    variables: The trainable variables, in the step's order.
    unit_taps: Per tapped unit, its calls' taps (with ``reads``).
    out_grads: Per unit, per call, the output gradient from the tape.

  Returns:
    The indices of the variables without a gradient; empty when a call's
    reads were not recorded (nothing is then known to be missing).
  """
  read: Set[int] = set()
  for taps, grads in zip(unit_taps, out_grads):
    for tap, grad in zip(taps, grads):
      if tap.reads is None:
        return frozenset()
      if _reaches_loss(grad):
        read.update(variable_key(v) for v in tap.reads)
  return frozenset(i for i, v in enumerate(variables)
                   if variable_key(v) not in read)


def zero_where_absent(tensors: List[tf.Tensor],
                      absent: FrozenSet[int]) -> List[tf.Tensor]:
  """``tensors`` (one per variable) with zeros at the ``absent`` indices."""
  return [tf.zeros_like(t) if i in absent else t
          for i, t in enumerate(tensors)]


def _tensors(nest: Any) -> List[tf.Tensor]:
  return [t for t in tf.nest.flatten(nest, expand_composites=True)
          if isinstance(t, tf.Tensor)]


def _ref_set(tensors: Iterable[tf.Tensor]) -> Set:
  return {t.ref() for t in tensors}


def _reached(start: tf.Tensor, targets: Set, stops: Set) -> Set:
  """The ``targets`` (tensor refs) that ``start`` depends on through data
  inputs, not looking past ``stops`` or past a target."""
  found, seen, frontier = set(), set(), [start]
  while frontier:
    t = frontier.pop()
    ref = t.ref()
    if ref in seen:
      continue
    seen.add(ref)
    if ref in targets:
      found.add(ref)
      continue
    if ref in stops:
      continue
    frontier.extend(t.op.inputs)
  return found


def check_sums_follow_calls(units: Sequence, variables: Sequence,
                            unit_taps: Sequence[Sequence],
                            out_grads: Sequence[Sequence],
                            sums: Sequence[tf.Tensor],
                            absent: FrozenSet[int],
                            stops: Sequence[tf.Tensor]) -> None:
  """Raises FastPathUnavailable if the clipped sum of a variable that has
  a gradient does not depend on the output gradient of a call that reads
  it (the rule leaves that call's part of the gradient out).

  Args:
    units: The tapped units (layers).
    variables: The trainable variables, in the step's order.
    unit_taps: Per unit, its calls' taps (with ``reads``).
    out_grads: Per unit, per call, the output gradient from the tape.
    sums: The clipped sum per variable, as the rules formed it.
    absent: Indices of the variables without a gradient (not checked).
    stops: Tensors not to look past (the records' scales and ``keep``,
      through which every sum depends on every output gradient).

  Runs only while tracing a graph (an eager step has no graph to walk).
  """
  if tf.executing_eagerly() or not all(
      isinstance(s, tf.Tensor) and hasattr(s, "op") for s in sums):
    return
  index = {variable_key(v): i for i, v in enumerate(variables)}
  # Per variable: (unit, call number, refs of that call's output gradient).
  calls: Dict[int, List] = {}
  boundary = _ref_set(stops)
  for unit, taps, grads in zip(units, unit_taps, out_grads):
    for number, (tap, grad) in enumerate(zip(taps, grads)):
      refs = _ref_set(_tensors(grad))
      boundary |= refs | _ref_set(_tensors((tap.args, tap.output)))
      if tap.reads is None or not _reaches_loss(grad):
        continue
      for v in tap.reads:
        i: Optional[int] = index.get(variable_key(v))
        if i is not None and i not in absent:
          calls.setdefault(i, []).append((unit, number, refs))
  for i, needed in calls.items():
    targets = set().union(*(refs for _, _, refs in needed))
    found = _reached(sums[i], targets, boundary)
    for unit, number, refs in needed:
      if not refs & found:
        raise linear.FastPathUnavailable(
            f"the clipped sum of variable {_variable_name(variables[i])} "
            f"does not depend on call {number + 1} of layer {unit.name!r}, "
            f"which reads it and reaches the loss: the layer's rule cannot "
            f"account for that call's part of the gradient (for every "
            f"record, the update would leave it out)")
