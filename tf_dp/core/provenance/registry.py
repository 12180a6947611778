"""The allowlist's registry, and what every rule needs.

``output_labels(op, inputs, forward)`` gives the labels of ``op``'s outputs
from its inputs' labels (``tf_dp.core.provenance.labels``): public outputs
when every input is public, whatever the operation; else the rule
registered for the operation's type (``register``), or ``Mixed`` when
there is none. The rules live by kind of operation in ``arithmetic``,
``images``, ``layout``, ``reshapes`` and ``lists``; ``tf_dp.core.provenance
.op_rules`` imports them all. ``forward`` marks the model's own forward
pass: there, an operation that certainly combines examples (a reduction
over the batch axis) gives a *proven* ``Mixed``.

While the walker labels, rules read the labels given so far and the sizes
of axes (``Context``).
"""

import dataclasses
from typing import (Any, Callable, Dict, List, Optional, Sequence, TypeGuard,
                    Union)
import numpy as np
import tensorflow as tf
from tensorflow.python.framework import tensor_util  # pylint: disable=g-direct-tensorflow-import

from tf_dp.core.provenance import shapes as shapes_lib
from tf_dp.core.provenance.labels import first_mixed
from tf_dp.core.provenance.labels import Interleaved
from tf_dp.core.provenance.labels import Label
from tf_dp.core.provenance.labels import Mixed
from tf_dp.core.provenance.labels import PUBLIC
from tf_dp.core.provenance.labels import Rows
from tf_dp.core.provenance.labels import Size


Rule = Callable[[tf.Operation, List[Label], bool], List[Label]]
_RULES: Dict[str, Rule] = {}


def register(*op_types: str) -> Callable[[Rule], Rule]:
  def decorate(rule):
    for op_type in op_types:
      _RULES[op_type] = rule
    return rule
  return decorate


_DATA_INDEPENDENT: Dict[str, Callable[[tf.Operation], bool]] = {}


def register_data_independent(
    *op_types: str) -> Callable[[Callable[[tf.Operation], bool]],
                                Callable[[tf.Operation], bool]]:
  """Registers a check that an operation's value is the same whatever its
  data inputs hold (consulted first, even when an input is mixed)."""
  def decorate(check):
    for op_type in op_types:
      _DATA_INDEPENDENT[op_type] = check
    return check
  return decorate


def known(op_type: str) -> bool:
  """Whether ``op_type`` is on the allowlist."""
  return op_type in _RULES


def output_labels(op: tf.Operation, inputs: List[Label],
                  forward: bool) -> List[Label]:
  """The labels of ``op``'s outputs (see the module docstring)."""
  if all(label is PUBLIC for label in inputs):
    return [PUBLIC] * len(op.outputs)
  check = _DATA_INDEPENDENT.get(op.type)
  if check is not None and check(op):
    return [PUBLIC] * len(op.outputs)
  mixed = first_mixed(*inputs)
  if mixed is not None:
    return [mixed] * len(op.outputs)
  rule = _RULES.get(op.type)
  if rule is None:
    return [_unknown(op)] * len(op.outputs)
  return rule(op, inputs, forward)


def _unknown(op):
  return Mixed(op.name, op.type, f"operation {op.type} is not known to keep "
               f"examples apart")


def mixed(op: tf.Operation, reason: str, proven: bool = False) -> Mixed:
  """A ``Mixed`` label lost at ``op``, for ``reason``."""
  return Mixed(op.name, op.type, reason, proven)


def all_outputs(op: tf.Operation, label: Label) -> List[Label]:
  """``label`` for each of ``op``'s outputs."""
  return [label] * len(op.outputs)


# --------------------------------------------------------------------------
# Static facts about tensors.


def rank(t: tf.Tensor) -> Optional[int]:
  return t.shape.rank


def static_dims(t: tf.Tensor) -> Optional[List[Optional[int]]]:
  return None if t.shape.rank is None else t.shape.as_list()


def constant(t: tf.Tensor) -> Optional[np.ndarray]:
  """``t``'s value if it is known when tracing, else None."""
  try:
    value = tensor_util.constant_value(t)
    if value is None and t.dtype.is_integer:
      value = tensor_util.try_evaluate_constant(t)
  except (TypeError, ValueError, tf.errors.OpError):
    return None
  return None if value is None else np.asarray(value)


def constant_element(t: tf.Tensor, index: int) -> Optional[int]:
  """Element ``index`` of a 1-D ``t`` if known when tracing (also when only
  that element is, as in ``tf.stack([0, n])``)."""
  value = constant(t)
  if value is not None:
    flat = value.reshape(-1)
    return int(flat[index]) if 0 <= index < flat.size else None
  op = t.op
  if op.type == "Pack" and op.get_attr("axis") == 0 and (
      index < len(op.inputs)):
    part = constant(op.inputs[index])
    return None if part is None or part.size != 1 else int(part.reshape(()))
  return None


def normalized_axes(value: Any, rank_: Optional[int]) -> List[int]:
  """The axes in ``value`` (a scalar or a vector), non-negative, sorted.

  Raises:
    ValueError: for a negative axis of a tensor of unknown rank (the walker
      labels such an operation ``Mixed``).
  """
  axes = [int(a) for a in np.asarray(value).reshape(-1)]
  if any(a < 0 for a in axes):
    if rank_ is None:
      raise ValueError(f"negative axes {axes} of a tensor of unknown rank")
    axes = [a + rank_ if a < 0 else a for a in axes]
  return sorted(set(axes))


class Context:
  """What the walker knows while it labels: every tensor's label so far
  (``label``), and the sizes of axes and shape vectors (``shapes``)."""

  def __init__(self, label: Callable[[tf.Tensor], Label],
               examples: Optional[int] = None) -> None:
    self.label = label
    self.shapes = shapes_lib.ShapeValues(self._axis_of_examples)
    # The number of examples when the batch's is known when tracing.
    self.examples = examples

  def _axis_of_examples(self, t):
    label = self.label(t)
    if isinstance(label, Rows):
      return label.axis, label.group
    return None


_CONTEXTS: List[Context] = []


def context() -> Context:
  return _CONTEXTS[-1]


def same_size(a: Size, b: Size) -> bool:
  """Whether two sizes are equal (when the number of examples is known,
  a static size may equal one that counts examples)."""
  if a is None or b is None:
    return False
  examples = context().examples if _CONTEXTS else None
  return a.with_examples(examples) == b.with_examples(examples)


class in_context:  # pylint: disable=invalid-name
  """Makes ``context`` the one rules read while the block runs."""

  def __init__(self, context: Context) -> None:
    self._context = context

  def __enter__(self):
    _CONTEXTS.append(self._context)

  def __exit__(self, *exc):
    _CONTEXTS.pop()


def moved(label: Label, axis: int) -> Label:
  """``label`` (rows by example, contiguous or interleaved) on ``axis``."""
  assert isinstance(label, (Rows, Interleaved)), label
  return dataclasses.replace(label, axis=axis)


def has_axis(label: Label) -> TypeGuard[Union[Rows, Interleaved]]:
  """Whether ``label`` holds examples on an axis (contiguous or
  interleaved)."""
  return isinstance(label, (Rows, Interleaved))


def writes_state(op: tf.Operation) -> bool:
  """Whether ``op`` may write a resource (a variable) from its other
  inputs: every operation with a resource input but the known reads."""
  return any(t.dtype == tf.resource for t in op.inputs) and (
      op.type not in _RESOURCE_READS)


_RESOURCE_READS = frozenset({
    "ReadVariableOp", "ResourceGather", "ResourceGatherNd", "VariableShape",
    "VarIsInitializedOp", "DestroyResourceOp", "While", "StatelessWhile",
    "If", "StatelessIf", "Case", "StatelessCase", "PartitionedCall",
    "StatefulPartitionedCall",
})


def data_inputs(op: tf.Operation, inputs: Sequence[Label]) -> bool:
  """Whether any non-resource input of ``op`` depends on the examples."""
  return any(label is not PUBLIC for t, label in zip(op.inputs, inputs)
             if t.dtype != tf.resource)
