"""Rules for elementwise operations, reductions, scans and products.

An elementwise result keeps examples apart when every operand that depends
on them holds them on the same axis of the result; a reduction, a scan or a
product when it does not run over the examples' axis (over it, in the
forward pass, it provably combines them).
"""

from typing import Optional, Sequence

import numpy as np
import tensorflow as tf

from tf_dp.core.provenance.labels import Interleaved
from tf_dp.core.provenance.labels import join
from tf_dp.core.provenance.labels import Label
from tf_dp.core.provenance.labels import Mixed
from tf_dp.core.provenance.labels import ONE
from tf_dp.core.provenance.labels import PUBLIC
from tf_dp.core.provenance.labels import Rows
from tf_dp.core.provenance.registry import all_outputs
from tf_dp.core.provenance.registry import constant
from tf_dp.core.provenance.registry import context
from tf_dp.core.provenance.registry import has_axis
from tf_dp.core.provenance.registry import mixed
from tf_dp.core.provenance.registry import moved
from tf_dp.core.provenance.registry import normalized_axes
from tf_dp.core.provenance.registry import rank
from tf_dp.core.provenance.registry import register
from tf_dp.core.provenance.registry import register_data_independent


# --------------------------------------------------------------------------
# Elementwise operations (with broadcasting).

_UNARY = (
    "Abs", "Acos", "Acosh", "Angle", "Asin", "Asinh", "Atan", "Atanh",
    "BesselI0e", "BesselI1e", "Cast", "Ceil", "CheckNumerics",
    "CheckNumericsV2", "Conj", "Cos", "Cosh", "Digamma", "Elu", "EnsureShape",
    "Erf", "Erfc", "Erfinv", "Exp", "Expm1", "Floor", "Identity", "Imag",
    "Inv", "Invert", "IsFinite", "IsInf", "IsNan", "LeakyRelu", "Lgamma",
    "Log", "Log1p", "LogicalNot", "Ndtri", "Neg", "PreventGradient", "Real",
    "Reciprocal", "Relu", "Relu6", "Rint", "Round", "Rsqrt", "Selu",
    "Sigmoid", "Sign", "Sin", "Sinh", "Snapshot", "Softplus", "Softsign",
    "Sqrt", "Square", "StopGradient", "Tan", "Tanh", "DebugIdentityV2",
    "DebugIdentityV3",
)
_BROADCASTING = (
    "Add", "AddV2", "ApproximateEqual", "Atan2", "BitwiseAnd", "BitwiseOr",
    "BitwiseXor", "Complex", "Div", "DivNoNan", "Equal", "FloorDiv",
    "FloorMod", "Greater", "GreaterEqual", "Igamma", "Igammac", "Less",
    "LessEqual", "LogicalAnd", "LogicalOr", "Mod", "Mul",
    "MulNoNan", "NextAfter", "NotEqual", "Polygamma", "Pow", "RealDiv",
    "SquaredDifference", "Sub", "TruncateDiv", "TruncateMod", "Xdivy",
    "Xlog1py", "Xlogy", "Zeta", "SelectV2", "ClipByValue",
    # Gradients of elementwise operations: (gradient, forward value).
    "EluGrad", "InvGrad", "LeakyReluGrad", "ReciprocalGrad", "Relu6Grad",
    "ReluGrad", "RsqrtGrad", "SeluGrad", "SigmoidGrad", "SoftplusGrad",
    "SoftsignGrad", "SqrtGrad", "TanhGrad", "IgammaGradA",
)


@register(*_UNARY)
def _unary(op, inputs, forward):
  del forward
  return all_outputs(op, inputs[0])


@register("IdentityN")
def _identity_n(op, inputs, forward):
  del op, forward
  return list(inputs)


@register("ZerosLike", "OnesLike", "Shape", "ShapeN", "Size", "Rank",
           "TensorListElementShape", "TensorListLength", "VariableShape")
def _shape_only(op, inputs, forward):
  """Depends on the inputs' shapes only (public: the batch size is)."""
  del inputs, forward
  return all_outputs(op, PUBLIC)


def broadcast(op: tf.Operation, tensors: Sequence[tf.Tensor],
              labels: Sequence[Label]) -> Label:
  """The label of an elementwise result of ``tensors`` (numpy broadcasting):
  every input's example axis must land on the same output axis, and must
  not be stretched from size 1 (one example read by every row)."""
  out_rank = rank(op.outputs[0])
  if out_rank is None:
    return mixed(op, "an elementwise result of unknown rank")
  out_dims = op.outputs[0].shape.as_list()
  interleaved = {l for l in labels if isinstance(l, Interleaved)}
  if interleaved:
    # Only elementwise with public operands or the same layout, on tensors
    # of the result's rank (the layout's axis is then the same).
    same = len(interleaved) == 1 and all(
        l is PUBLIC or (l in interleaved and rank(t) == out_rank)
        for t, l in zip(tensors, labels))
    return interleaved.pop() if same else mixed(
        op, "interleaved rows meet other rows")
  found: Label = PUBLIC
  for t, label in zip(tensors, labels):
    if label is PUBLIC:
      continue
    t_rank = rank(t)
    if not isinstance(label, Rows) or t_rank is None:
      return mixed(op, f"an elementwise operand laid out as {label}")
    axis = label.axis + out_rank - t_rank
    if t.shape[label.axis] == 1 and out_dims[axis] != 1:
      return mixed(op, "an example axis of size 1 stretched to many rows")
    found = join(found, Rows(axis, label.group), op.name, op.type)
    if isinstance(found, Mixed):
      return found
  return found


@register(*_BROADCASTING)
def _broadcasting(op, inputs, forward):
  del forward
  return all_outputs(op, broadcast(op, list(op.inputs), inputs))


@register_data_independent("Maximum", "Minimum")
def _clamped_to_a_constant(op: tf.Operation) -> bool:
  """Whether integer ``Minimum(a, Maximum(b, x))`` with constants ``a <=
  b`` (or ``Maximum(b, Minimum(a, x))`` with ``b >= a``) is ``op``: its
  value is the outer constant whatever ``x`` holds (``tf.math.bincount``'s
  output size with ``minlength == maxlength``, as ``CategoryEncoding``
  computes it from the batch's largest token)."""
  if not op.outputs[0].dtype.is_integer:
    return False
  inner_type = "Maximum" if op.type == "Minimum" else "Minimum"
  for outer in (0, 1):
    bound, inner = constant(op.inputs[outer]), op.inputs[1 - outer]
    if bound is None or inner.op.type != inner_type:
      continue
    for t in inner.op.inputs:
      inner_bound = constant(t)
      if inner_bound is None:
        continue
      if op.type == "Minimum" and np.all(bound <= inner_bound):
        return True
      if op.type == "Maximum" and np.all(bound >= inner_bound):
        return True
  return False


@register("Maximum", "Minimum")
def _maximum_minimum(op, inputs, forward):
  del forward
  return all_outputs(op, broadcast(op, list(op.inputs), inputs))


@register("DenseBincount")
def _dense_bincount(op, inputs, forward):
  """``DenseBincount(x, size, weights)``: a matrix ``x`` is counted row by
  row; a vector is counted as a whole (over its examples, if it has
  them)."""
  x, size, weights = inputs
  if size is not PUBLIC:
    return all_outputs(op, mixed(op, "a count of data-dependent size"))
  if rank(op.inputs[0]) == 2 and isinstance(x, Rows) and x.axis == 0 and (
      weights is PUBLIC or weights == x):
    return all_outputs(op, Rows(0, x.group))
  return all_outputs(op, mixed(op, "a count over the examples' axis",
                               proven=forward and isinstance(x, Rows)))


@register("AddN")
def _add_n(op, inputs, forward):
  del forward
  return all_outputs(op, broadcast(op, list(op.inputs), inputs))


@register("Select")
def _select(op, inputs, forward):
  """``Select(c, t, e)``: a vector ``c`` picks rows of ``t`` / ``e``."""
  del forward
  cond, rest = op.inputs[0], list(op.inputs[1:])
  if rank(cond) == 1 and (rank(rest[0]) or 0) > 1:
    label = broadcast(op, rest, inputs[1:])
    if inputs[0] is PUBLIC:
      return all_outputs(op, label)
    if isinstance(inputs[0], Rows) and inputs[0].axis == 0 and (
        label is PUBLIC or (isinstance(label, Rows) and label.axis == 0)):
      return all_outputs(op, Rows(0, inputs[0].group))
    return all_outputs(op, mixed(op, "a row selector laid out differently"))
  return all_outputs(op, broadcast(op, list(op.inputs), inputs))


# --------------------------------------------------------------------------
# Reductions and scans.


def _reduced(op, label, axes, keep_dims, forward):
  if label.axis in axes:
    return mixed(op, f"{op.type} over the examples' axis {label.axis}",
                  proven=forward)
  if keep_dims:
    return label
  return Rows(label.axis - sum(1 for a in axes if a < label.axis),
              label.group)


@register("Sum", "Mean", "Max", "Min", "Prod", "All", "Any",
           "EuclideanNorm")
def _reduction(op, inputs, forward):
  label = inputs[0]
  if inputs[1] is not PUBLIC or not isinstance(label, Rows):
    return all_outputs(op, mixed(op, "a reduction over data-dependent axes"))
  keep_dims = op.get_attr("keep_dims")
  axes = constant(op.inputs[1])
  ndims = rank(op.inputs[0])
  if axes is not None and ndims is not None:
    return all_outputs(op, _reduced(op, label, normalized_axes(axes, ndims),
                                    keep_dims, forward))
  axis = broadcast_reduction_axis(op.inputs[1], op.inputs[0], label,
                                  keep_dims)
  if axis is not None:
    return all_outputs(op, Rows(axis, label.group))
  return all_outputs(op, mixed(op, "a reduction over axes unknown when tracing"))


def broadcast_reduction_axis(axes: tf.Tensor, grad: tf.Tensor, label: Rows,
                             keep_dims: bool) -> Optional[int]:
  """Whether ``reduce_sum(grad, axes)``, with ``axes`` an output of
  ``BroadcastGradientArgs(s0, s1)`` (TensorFlow's gradient of a
  broadcasting operation whose shapes are unknown when tracing: ``s_k`` is
  the shape, or the batch axes, of operand k), leaves ``grad``'s example
  axis alone.

  Output k lists the axes (of the shapes aligned right) where operand k
  has size 1 and the result not. ``grad``'s example axis ``b`` is among
  them only if operand k's size there may be 1: not if it is a known size
  other than 1, nor if it is ``N * g`` (operand k holds rows by example
  there), which is 1 only for a batch of one example with one row each,
  where the sum combines nothing.

  Returns the example axis of the sum (None if it may be reduced; without
  ``keep_dims``, also if an axis before it may be).
  """
  op = axes.op
  while op.type in ("Identity", "Cast"):
    op = op.inputs[0].op
  if op.type != "BroadcastGradientArgs":
    return None
  index = _output_index(axes, op)
  shapes = context().shapes
  first, second = shapes.value(op.inputs[0]), shapes.value(op.inputs[1])
  if first is None or second is None:
    return None
  width = max(len(first), len(second))
  own = (first, second)[index]
  padded = [ONE] * (width - len(own)) + own
  never_reduced = lambda size: size is not None and (
      size.counts_examples or (not size.symbols and size.coefficient != 1))
  checked = range(label.axis + 1) if not keep_dims else [label.axis]
  # Axes past the broadcast ones are never reduced.
  if all(a >= width or never_reduced(padded[a]) for a in checked):
    return label.axis
  return None


def _output_index(t, op):
  # ``t`` reached ``op`` through Identity / Cast: follow them back.
  while t.op is not op:
    t = t.op.inputs[0]
  return t.value_index


@register("ArgMax", "ArgMin")
def _arg_reduction(op, inputs, forward):
  label = inputs[0]
  axis = constant(op.inputs[1])
  ndims = rank(op.inputs[0])
  if not isinstance(label, Rows) or axis is None or ndims is None:
    return all_outputs(op, mixed(op, "an arg-reduction over unknown axes"))
  return all_outputs(op, _reduced(op, label, normalized_axes(axis, ndims),
                                  False, forward))


@register("Cumsum", "Cumprod", "CumulativeLogsumexp")
def _scan(op, inputs, forward):
  label = inputs[0]
  axis = constant(op.inputs[1])
  ndims = rank(op.inputs[0])
  if not isinstance(label, Rows) or axis is None or ndims is None:
    return all_outputs(op, mixed(op, "a scan over unknown axes"))
  if label.axis in normalized_axes(axis, ndims):
    return all_outputs(op, mixed(op, f"{op.type} along the examples' axis",
                           proven=forward))
  return all_outputs(op, label)


def _last_axis_op(op, inputs, forward):
  """Operations along the last axis (softmax, top-k, sorting)."""
  label = inputs[0]
  if any(l is not PUBLIC for l in inputs[1:]) or not isinstance(label, Rows):
    return all_outputs(op, mixed(op, f"{op.type} of data-dependent arguments"))
  ndims = rank(op.inputs[0])
  if ndims is None or label.axis == ndims - 1:
    return all_outputs(op, mixed(op, f"{op.type} along the examples' axis",
                           proven=forward and ndims is not None))
  return all_outputs(op, label)


register("Softmax", "LogSoftmax", "TopKV2", "InTopKV2", "NthElement")(
    _last_axis_op)


@register("SparseSoftmaxCrossEntropyWithLogits",
           "SoftmaxCrossEntropyWithLogits")
def _cross_entropy(op, inputs, forward):
  """Per-row losses of ``[batch, classes]`` logits and labels."""
  del forward
  rows = [l for l in inputs if l is not PUBLIC]
  if all(isinstance(l, Rows) and l.axis == 0 for l in rows):
    return [Rows(0, rows[0].group)] * len(op.outputs)
  return all_outputs(op, mixed(op, "cross-entropy rows laid out differently"))


# --------------------------------------------------------------------------
# Products.


@register("MatMul")
def _matmul(op, inputs, forward):
  a, b = inputs
  if a is not PUBLIC and b is not PUBLIC:
    return all_outputs(op, mixed(op, "a product of two data-dependent matrices",
                           proven=forward))
  side, label = (0, a) if a is not PUBLIC else (1, b)
  if not has_axis(label):
    return all_outputs(op, mixed(op, f"a matmul of an operand laid out as {label}"))
  transposed = op.get_attr("transpose_a" if side == 0 else "transpose_b")
  free = (1 if transposed else 0) if side == 0 else (0 if transposed else 1)
  if label.axis != free:
    return all_outputs(op, mixed(op, "a matmul that sums over the examples",
                           proven=forward))
  return all_outputs(op, moved(label, side))


@register("BatchMatMul", "BatchMatMulV2", "BatchMatMulV3")
def _batch_matmul(op, inputs, forward):
  out_rank = rank(op.outputs[0])
  if out_rank is None:
    return all_outputs(op, mixed(op, "a batched matmul of unknown rank"))
  adj = [op.get_attr("adj_x"), op.get_attr("adj_y")]
  found = []
  for side, (t, label) in enumerate(zip(op.inputs[:2], inputs[:2])):
    if label is PUBLIC:
      continue
    r = rank(t)
    if r is None:
      return all_outputs(op, mixed(op, "a batched matmul of unknown rank"))
    # Matrix axes: (rows, columns); the contracted one is columns of x
    # (rows if adjoint) and rows of y (columns if adjoint).
    contracted = (r - 1 if not adj[side] else r - 2) if side == 0 else (
        r - 2 if not adj[side] else r - 1)
    if label.axis == contracted:
      return all_outputs(op, mixed(op, "a batched matmul that sums over the "
                             "examples", proven=forward))
    if label.axis < r - 2:
      found.append(Rows(label.axis + out_rank - r, label.group))
    elif side == 0:
      found.append(Rows(out_rank - 2, label.group))
    else:
      found.append(Rows(out_rank - 1, label.group))
  result: Label = found[0]
  for other in found[1:]:
    result = join(result, other, op.name, op.type)
  if isinstance(result, Mixed):
    result = mixed(op, "a batched matmul pairing different examples",
                    proven=forward)
  return all_outputs(op, result)


def _einsum_subscripts(op):
  equation = op.get_attr("equation").decode()
  lhs, rhs = equation.replace(" ", "").split("->")
  subscripts = lhs.split(",")
  ranks = [rank(t) for t in op.inputs]
  if "..." in equation:
    known = [r for r in ranks if r is not None]
    if len(known) < len(ranks):
      return None
    width = max(r - len(s.replace("...", ""))
                for r, s in zip(known, subscripts) if "..." in s)
    ellipsis = "".join(chr(0x100 + k) for k in range(width))
    expand = lambda s, r: s.replace("...", ellipsis[width - (
        r - len(s.replace("...", ""))):])
    subscripts = [expand(s, r) if "..." in s else s
                  for s, r in zip(subscripts, known)]
    rhs = rhs.replace("...", ellipsis)
  return subscripts, rhs


@register("Einsum")
def _einsum(op, inputs, forward):
  parsed = _einsum_subscripts(op)
  if parsed is None:
    return all_outputs(op, mixed(op, "an einsum of unknown ranks"))
  subscripts, output = parsed
  letters = set()
  group = None
  for subscript, label in zip(subscripts, inputs):
    if label is PUBLIC:
      continue
    letters.add(subscript[label.axis])
    group = label.group
  if len(letters) != 1:
    return all_outputs(op, mixed(op, "an einsum pairing different examples",
                           proven=forward))
  letter = letters.pop()
  if letter not in output:
    return all_outputs(op, mixed(op, "an einsum that sums over the examples",
                           proven=forward))
  return all_outputs(op, Rows(output.index(letter), group))
