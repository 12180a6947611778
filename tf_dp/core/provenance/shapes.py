"""Sizes of a traced computation's axes as products of symbols.

A reshape keeps examples apart if each example's entries land in whole
rows of one output axis. Deciding that needs the sizes involved, which are
often unknown when tracing: the number of examples ``N`` above all, and a
sequence length, or sizes TensorFlow's shape inference lost (a gradient
reshaped to ``tf.shape(x)``). Here a size is a ``Monomial``: a positive
integer times a product of symbols, ``N`` for the number of examples and
one symbol per unknown axis of a tensor. Shape vectors computed in the
graph (``tf.shape(x)``, slices, gathers and products of it, stacks and
concatenations of them) are evaluated to lists of such sizes.

An axis that holds rows by example (``labels.Rows``) has size ``N`` times
its group, whatever TensorFlow knows of it.
"""

from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import tensorflow as tf

from tf_dp.core.provenance.labels import EXAMPLES
from tf_dp.core.provenance.labels import Monomial
from tf_dp.core.provenance.labels import ONE
from tf_dp.core.provenance.labels import product
from tf_dp.core.provenance.labels import Size

class ShapeValues:
  """Sizes of tensors' axes and values of shape vectors, as monomials.

  Args:
    axis_of_examples: ``t -> (axis, group)`` if ``t`` holds rows by example
      on ``axis`` (``group`` rows each, a monomial), else None.
  """

  def __init__(self, axis_of_examples: Callable[[tf.Tensor],
                                               Optional[Tuple[int, Size]]]
               ) -> None:
    self._axis_of_examples = axis_of_examples
    self._values: Dict[object, Optional[List[Size]]] = {}

  def size(self, t: tf.Tensor, axis: int) -> Size:
    """The size of ``t``'s axis ``axis``."""
    known = t.shape[axis] if t.shape.rank is not None else None
    if known is not None:
      return Monomial(int(known))
    rows = self._axis_of_examples(t)
    if rows is not None and rows[0] == axis and rows[1] is not None:
      return Monomial(1, (EXAMPLES,)) * rows[1]
    source = _same_shape_source(t)
    if source is not None and source.shape.rank == t.shape.rank:
      return self.size(source, axis)
    if t.op.type == "MatMul" and t.value_index == 0 and axis in (0, 1):
      # [a0, k] x [k, b1] -> [a0, b1] (with the operands' transposes).
      a, b = t.op.inputs
      if axis == 0:
        return self.size(a, 1 if t.op.get_attr("transpose_a") else 0)
      return self.size(b, 0 if t.op.get_attr("transpose_b") else 1)
    if t.op.type in ("Reshape", "BroadcastTo", "Fill"):
      target = self.value(t.op.inputs[1 if t.op.type != "Fill" else 0])
      if target is not None and len(target) == t.shape.rank:
        size = target[axis]
        if size is not None and size.coefficient > 0:
          return size
    return Monomial(1, (f"{t.op.name}:{t.value_index}:{axis}",))

  def sizes(self, t: tf.Tensor) -> Optional[List[Size]]:
    if t.shape.rank is None:
      return None
    return [self.size(t, i) for i in range(t.shape.rank)]

  def value(self, t: tf.Tensor) -> Optional[List[Size]]:
    """The value of an integer vector (or scalar, as a list of one) ``t``
    as sizes, None where unknown; None if not even its length is."""
    key = t.ref()
    if key not in self._values:
      self._values[key] = self._evaluate(t)
    return self._values[key]

  def _evaluate(self, t):
    const = _constant(t)
    if const is not None:
      return [Monomial(int(v)) for v in const.reshape(-1)]
    op = t.op
    if op.type == "ShapeN":
      return self.sizes(op.inputs[t.value_index])
    handler = _HANDLERS.get(op.type)
    if handler is None:
      return None
    try:
      return handler(self, op)
    except (ValueError, TypeError, IndexError):
      return None


# Operations whose first output has the shape of one of their inputs.
_SAME_SHAPE_AS_INPUT = {
    "FusedBatchNorm": 0, "FusedBatchNormV2": 0, "FusedBatchNormV3": 0,
    "FusedBatchNormGrad": 1, "FusedBatchNormGradV2": 1,
    "FusedBatchNormGradV3": 1, "BiasAdd": 0, "Identity": 0, "Relu": 0,
    "ReluGrad": 1, "TanhGrad": 0, "SigmoidGrad": 0, "EluGrad": 1,
    "SeluGrad": 1, "Relu6Grad": 1, "SoftplusGrad": 1, "LeakyReluGrad": 1,
    "Softmax": 0, "LogSoftmax": 0, "Neg": 0, "Cast": 0, "StopGradient": 0,
    "MaxPoolGrad": 0, "MaxPoolGradV2": 0, "ZerosLike": 0, "OnesLike": 0,
}


def _same_shape_source(t):
  if t.value_index != 0:
    return None
  index = _SAME_SHAPE_AS_INPUT.get(t.op.type)
  return None if index is None else t.op.inputs[index]


def _constant(t):
  from tensorflow.python.framework import tensor_util  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
  if not t.dtype.is_integer:
    return None
  try:
    value = tensor_util.constant_value(t)
    if value is None:
      value = tensor_util.try_evaluate_constant(t)
  except (TypeError, ValueError, tf.errors.OpError):
    return None
  return None if value is None else np.asarray(value)


def _shape(values, op):
  return values.sizes(op.inputs[0])


def _same(values, op):
  return values.value(op.inputs[0])


def _strided_slice(values, op):
  vector = values.value(op.inputs[0])
  bounds = [_constant(t) for t in op.inputs[1:4]]
  if vector is None or any(b is None or b.size != 1 for b in bounds):
    return None
  if op.get_attr("ellipsis_mask") or op.get_attr("new_axis_mask"):
    return None
  first, last, stride = (int(b.reshape(-1)[0]) for b in bounds)
  begin = None if op.get_attr("begin_mask") & 1 else first
  end = None if op.get_attr("end_mask") & 1 else last
  if op.get_attr("shrink_axis_mask") & 1:
    return [vector[begin or 0]]
  return vector[slice(begin, end, stride)]


def _slice(values, op):
  vector = values.value(op.inputs[0])
  begin, size = _constant(op.inputs[1]), _constant(op.inputs[2])
  if vector is None or begin is None or size is None:
    return None
  begin, size = int(begin.reshape(-1)[0]), int(size.reshape(-1)[0])
  return vector[begin:] if size < 0 else vector[begin:begin + size]


def _gather(values, op):
  vector = values.value(op.inputs[0])
  index = _constant(op.inputs[1])
  if vector is None or index is None:
    return None
  if op.type == "GatherV2" and int(_constant(op.inputs[2])) != 0:
    return None
  return [vector[int(i)] for i in index.reshape(-1)]


def _pack(values, op):
  if op.get_attr("axis") != 0:
    return None
  parts = [values.value(t) for t in op.inputs]
  if any(p is None or len(p) != 1 for p in parts):
    return None
  return [p[0] for p in parts]


def _concat(values, op):
  parts = [values.value(t) for t in op.inputs[:-1]]
  if any(p is None for p in parts):
    return None
  return [s for p in parts for s in p]


def _prod(values, op):
  vector = values.value(op.inputs[0])
  if vector is None or op.inputs[0].shape.rank != 1:
    return None
  return [product(vector)]


def _mul(values, op):
  a, b = values.value(op.inputs[0]), values.value(op.inputs[1])
  if a is None or b is None or len(a) != 1 or len(b) != 1:
    return None
  return [product([a[0], b[0]])]


def _broadcast_args(values, op):
  a, b = values.value(op.inputs[0]), values.value(op.inputs[1])
  if a is None or b is None:
    return None
  width = max(len(a), len(b))
  a = [ONE] * (width - len(a)) + a
  b = [ONE] * (width - len(b)) + b
  out = []
  for x, y in zip(a, b):
    if x is not None and x.is_one:
      out.append(y)
    elif y is not None and y.is_one or x == y:
      out.append(x)
    else:
      out.append(None)
  return out


def _dynamic_stitch(values, op):
  """``DynamicStitch(indices, data)`` of shape vectors, as
  ``reduced_shape`` builds a reduction's shape with kept axes."""
  n = len(op.inputs) // 2
  indices = [_constant(t) for t in op.inputs[:n]]
  data = [values.value(t) for t in op.inputs[n:]]
  if any(i is None for i in indices) or any(d is None for d in data):
    return None
  out = {}
  for index, part in zip(indices, data):
    for i, size in zip(index.reshape(-1), part):
      out[int(i)] = size
  if sorted(out) != list(range(len(out))):
    return None
  return [out[i] for i in range(len(out))]


def _fill(values, op):
  """``tf.ones(shape)`` of a vector (the ones of ``reduced_shape``)."""
  length = values.value(op.inputs[0])
  fill = _constant(op.inputs[1])
  if length is None or len(length) != 1 or fill is None or (
      length[0] is None or length[0].symbols):
    return None
  return [Monomial(int(fill))] * length[0].coefficient


_HANDLERS = {
    "DynamicStitch": _dynamic_stitch, "Fill": _fill,
    "Shape": _shape, "Cast": _same, "Identity": _same, "StopGradient": _same,
    "StridedSlice": _strided_slice, "Slice": _slice, "GatherV2": _gather,
    "Gather": _gather, "Pack": _pack, "ConcatV2": _concat, "Prod": _prod,
    "Mul": _mul, "BroadcastArgs": _broadcast_args,
}
