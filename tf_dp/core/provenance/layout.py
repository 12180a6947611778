"""Rules for operations that move, slice, join or pick entries:
transposes, expand and squeeze, slices, concatenation and stacking, splits,
padding and tiling, broadcasts, gathers, one-hot, matrix-shaped operations.
They keep examples apart when the examples' axis is moved whole, never
sliced, split, padded or picked from."""

from typing import Optional

import numpy as np

from tf_dp.core.provenance.arithmetic import broadcast
from tf_dp.core.provenance.labels import join
from tf_dp.core.provenance.labels import Label
from tf_dp.core.provenance.labels import PUBLIC
from tf_dp.core.provenance.labels import Rows
from tf_dp.core.provenance.registry import all_outputs
from tf_dp.core.provenance.registry import constant
from tf_dp.core.provenance.registry import constant_element
from tf_dp.core.provenance.registry import context
from tf_dp.core.provenance.registry import has_axis
from tf_dp.core.provenance.registry import mixed
from tf_dp.core.provenance.registry import moved
from tf_dp.core.provenance.registry import normalized_axes
from tf_dp.core.provenance.registry import rank
from tf_dp.core.provenance.registry import register
from tf_dp.core.provenance.registry import same_size
from tf_dp.core.provenance.registry import static_dims


@register("Transpose", "ConjugateTranspose")
def _transpose(op, inputs, forward):
  del forward
  label = inputs[0]
  perm = constant(op.inputs[1])
  if inputs[1] is not PUBLIC or perm is None or not has_axis(label):
    return all_outputs(op, mixed(op, "a transpose by an unknown permutation"))
  order = [int(p) for p in perm.reshape(-1)]
  return all_outputs(op, moved(label, order.index(label.axis)))


@register("ExpandDims")
def _expand_dims(op, inputs, forward):
  del forward
  label = inputs[0]
  axis = constant(op.inputs[1])
  out_rank = rank(op.outputs[0])
  if axis is None or out_rank is None or not has_axis(label):
    return all_outputs(op, mixed(op, "an expand_dims at an unknown axis"))
  position = int(axis.reshape(-1)[0])
  position = position + out_rank if position < 0 else position
  return all_outputs(op, moved(label, label.axis + (
      1 if position <= label.axis else 0)))


@register("Squeeze")
def _squeeze(op, inputs, forward):
  del forward
  label = inputs[0]
  in_dims = static_dims(op.inputs[0])
  if in_dims is None or not has_axis(label):
    return all_outputs(op, mixed(op, "a squeeze of unknown rank"))
  axes = list(op.get_attr("squeeze_dims"))
  if axes:
    axes = normalized_axes(axes, len(in_dims))
  else:
    if any(d is None for d in in_dims):
      return all_outputs(op, mixed(op, "a squeeze of unknown dimensions"))
    axes = [i for i, d in enumerate(in_dims) if d == 1]
  if label.axis in axes:
    return all_outputs(op, mixed(op, "a squeeze of the examples' axis"))
  return all_outputs(op, moved(label, label.axis - sum(1 for a in axes
                                                 if a < label.axis)))


def _slice_keeps(begin, end, stride, dim, begin_masked, end_masked):
  """Whether a slice spec takes the whole of an axis of size ``dim``."""
  if stride != 1:
    return False
  if not begin_masked and begin != 0:
    return False
  if end_masked:
    return True
  return dim is not None and end is not None and end >= dim


def _sliced_axes(op, dims, bounds):
  """``{input axis: output axis}`` for the axes a strided slice takes
  whole (``dims``: the input's static sizes; ``bounds``: its begin, end
  and strides tensors), or None if its spec is unknown."""
  n = bounds[0].shape.num_elements()
  if n is None:
    return None
  mask = {name: op.get_attr(name) for name in (
      "begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask",
      "shrink_axis_mask")}
  bit = lambda name, i: bool(mask[name] & (1 << i))
  consuming = sum(1 for i in range(n)
                  if not bit("new_axis_mask", i) and not bit("ellipsis_mask",
                                                             i))
  whole, d, o = {}, 0, 0
  for i in range(n):
    if bit("ellipsis_mask", i):
      for _ in range(len(dims) - consuming):
        whole[d] = o
        d, o = d + 1, o + 1
      continue
    if bit("new_axis_mask", i):
      o += 1
      continue
    if not bit("shrink_axis_mask", i):
      begin, end, stride = (constant_element(b, i) for b in bounds)
      if _slice_keeps(begin, end, stride, dims[d], bit("begin_mask", i),
                      bit("end_mask", i)):
        whole[d] = o
      o += 1
    d += 1
  for rest in range(d, len(dims)):  # Implicitly whole after the spec.
    whole[rest] = o + rest - d
  return whole


@register("StridedSlice")
def _strided_slice(op, inputs, forward):
  del forward
  label = inputs[0]
  dims = static_dims(op.inputs[0])
  if not isinstance(label, Rows) or dims is None or any(
      l is not PUBLIC for l in inputs[1:]):
    return all_outputs(op, mixed(op, "a slice of unknown shape"))
  whole = _sliced_axes(op, dims, op.inputs[1:4])
  if whole is None or label.axis not in whole:
    return all_outputs(op, mixed(op, "a slice of the examples' axis"))
  return all_outputs(op, Rows(whole[label.axis], label.group))


@register("StridedSliceGrad")
def _strided_slice_grad(op, inputs, forward):
  """The gradient of a strided slice: ``dy`` put back where the slice took
  it; an axis the slice took whole maps back to itself."""
  del forward
  label = inputs[4]
  sizes = context().shapes.value(op.inputs[0])
  if not isinstance(label, Rows) or sizes is None or any(
      l is not PUBLIC for l in inputs[:4]):
    return all_outputs(op, mixed(op, "a slice gradient of unknown shape"))
  dims = [None if s is None or s.symbols else s.coefficient for s in sizes]
  whole = _sliced_axes(op, dims, op.inputs[1:4]) or {}
  back = [d for d, o in whole.items() if o == label.axis]
  if len(back) != 1:
    return all_outputs(op, mixed(op, "a slice gradient of the examples' axis"))
  return all_outputs(op, Rows(back[0], label.group))


def _begins_at_zero(begin, axis) -> bool:
  """Whether element ``axis`` of a slice's ``begin`` is 0: a constant, or
  an offset from ``ConcatOffset`` (the gradient of a concatenation) along
  another axis than the concatenation's."""
  if constant_element(begin, axis) == 0:
    return True
  op = begin.op
  if op.type == "ConcatOffset":
    concat_axis = constant(op.inputs[0])
    rank_ = op.inputs[1].shape.num_elements()
    if concat_axis is not None and rank_ is not None:
      return normalized_axes(concat_axis, rank_)[0] != axis
  return False


@register("Slice")
def _slice(op, inputs, forward):
  del forward
  label = inputs[0]
  if not isinstance(label, Rows) or any(l is not PUBLIC for l in inputs[1:]):
    return all_outputs(op, mixed(op, "a slice of data-dependent extent"))
  shapes = context().shapes
  size = shapes.value(op.inputs[2])
  taken = None if size is None or label.axis >= len(size) else size[
      label.axis]
  whole = taken is not None and (taken.coefficient == -1 or same_size(
      taken, shapes.size(op.inputs[0], label.axis)))
  if _begins_at_zero(op.inputs[1], label.axis) and whole:
    return all_outputs(op, label)
  return all_outputs(op, mixed(op, "a slice of the examples' axis"))


def _same_axis(op, labels, axis_of):
  """The common example axis of the data-dependent inputs (their axis
  mapped by ``axis_of``), or a ``Mixed``."""
  found: Optional[Label] = None
  for label in labels:
    if label is PUBLIC:
      continue
    if not isinstance(label, Rows):
      return mixed(op, f"an input laid out as {label}")
    candidate = Rows(axis_of(label.axis), label.group)
    found = candidate if found is None else join(found, candidate, op.name,
                                                 op.type)
  return found if found is not None else PUBLIC


@register("ConcatV2", "Concat")
def _concat(op, inputs, forward):
  del forward
  if op.type == "ConcatV2":
    values, value_labels, axis_t = op.inputs[:-1], inputs[:-1], op.inputs[-1]
  else:
    values, value_labels, axis_t = op.inputs[1:], inputs[1:], op.inputs[0]
  axis = constant(axis_t)
  r = rank(op.outputs[0])
  if axis is None or r is None:
    return all_outputs(op, mixed(op, "a concatenation along an unknown axis"))
  concat_axis = normalized_axes(axis, r)[0]
  label = _same_axis(op, value_labels, lambda a: a)
  if isinstance(label, Rows) and label.axis == concat_axis:
    return all_outputs(op, mixed(op, "a concatenation along the examples' axis"))
  del values
  return all_outputs(op, label)


@register("Pack")
def _pack(op, inputs, forward):
  del forward
  axis = op.get_attr("axis")
  r = rank(op.outputs[0])
  if r is None:
    return all_outputs(op, mixed(op, "a stack of unknown rank"))
  axis = axis + r if axis < 0 else axis
  return all_outputs(op, _same_axis(op, inputs,
                             lambda a: a + (1 if axis <= a else 0)))


@register("Unpack")
def _unpack(op, inputs, forward):
  del forward
  label = inputs[0]
  r = rank(op.inputs[0])
  if not isinstance(label, Rows) or r is None:
    return all_outputs(op, mixed(op, "an unstack of unknown rank"))
  axis = op.get_attr("axis")
  axis = axis + r if axis < 0 else axis
  if axis == label.axis:
    return all_outputs(op, mixed(op, "an unstack into single examples"))
  return all_outputs(op, Rows(label.axis - (1 if axis < label.axis else 0),
                       label.group))


@register("Split", "SplitV")
def _split(op, inputs, forward):
  del forward
  if op.type == "Split":
    value, label, axis_t = op.inputs[1], inputs[1], op.inputs[0]
  else:
    value, label, axis_t = op.inputs[0], inputs[0], op.inputs[2]
  axis = constant(axis_t)
  if not isinstance(label, Rows) or axis is None or rank(value) is None:
    return all_outputs(op, mixed(op, "a split along an unknown axis"))
  if normalized_axes(axis, rank(value))[0] == label.axis:
    return all_outputs(op, mixed(op, "a split of the examples' axis"))
  return all_outputs(op, label)


def _unchanged_along_examples(arg_index, keeps):
  """A rule for ``op(x, spec)`` that keeps x's example axis if
  ``keeps(op, spec, axis)``."""
  def rule(op, inputs, forward):
    del forward
    label = inputs[0]
    if not isinstance(label, Rows) or any(
        l is not PUBLIC for l in inputs[1:]):
      return all_outputs(op, mixed(op, f"{op.type} of data-dependent arguments"))
    if not keeps(op, op.inputs[arg_index], label.axis):
      return all_outputs(op, mixed(op, f"{op.type} along the examples' axis"))
    return all_outputs(op, label)
  return rule


def _pads_nothing(op, paddings, axis):
  del op
  value = constant(paddings)
  if value is not None:
    return bool(np.all(value[axis] == 0))
  return False


def _tiles_once(op, multiples, axis):
  del op
  return constant_element(multiples, axis) == 1


def _reverses_elsewhere(op, axes, axis):
  value = constant(axes)
  return value is not None and axis not in normalized_axes(
      value, rank(op.inputs[0]))


register("Pad", "PadV2", "MirrorPad")(
    _unchanged_along_examples(1, _pads_nothing))
register("Tile")(_unchanged_along_examples(1, _tiles_once))
register("ReverseV2")(_unchanged_along_examples(1, _reverses_elsewhere))
register("MirrorPadGrad")(_unchanged_along_examples(1, _pads_nothing))


@register("Roll")
def _roll(op, inputs, forward):
  del forward
  label = inputs[0]
  axes = constant(op.inputs[2])
  if not isinstance(label, Rows) or axes is None or any(
      l is not PUBLIC for l in inputs[1:]):
    return all_outputs(op, mixed(op, "a roll of data-dependent arguments"))
  if label.axis in normalized_axes(axes, rank(op.inputs[0])):
    return all_outputs(op, mixed(op, "a roll along the examples' axis"))
  return all_outputs(op, label)


@register("BroadcastTo")
def _broadcast_to(op, inputs, forward):
  del forward
  label = inputs[0]
  if inputs[1] is not PUBLIC or not isinstance(label, Rows):
    return all_outputs(op, mixed(op, "a broadcast to a data-dependent shape"))
  return all_outputs(op, broadcast(op, [op.inputs[0]], [label]))


@register("GatherV2", "Gather")
def _gather(op, inputs, forward):
  del forward
  params, indices = op.inputs[0], op.inputs[1]
  p_label, i_label = inputs[0], inputs[1]
  batch_dims = op.get_attr("batch_dims") if op.type == "GatherV2" else 0
  axis_value = constant(op.inputs[2]) if op.type == "GatherV2" else (
      np.array(0))
  indices_rank = rank(indices)
  if axis_value is None or rank(params) is None or indices_rank is None:
    return all_outputs(op, mixed(op, "a gather along an unknown axis"))
  axis = normalized_axes(axis_value, rank(params))[0]
  if batch_dims < 0:
    batch_dims += indices_rank
  if batch_dims:
    both = [l for l in (p_label, i_label) if l is not PUBLIC]
    if all(isinstance(l, Rows) and l.axis == 0 for l in both) and (
        axis >= batch_dims):
      return all_outputs(op, Rows(0, both[0].group))
    return all_outputs(op, mixed(op, "a batched gather laid out differently"))
  if p_label is PUBLIC:  # A lookup: rows by the indices' rows.
    return all_outputs(op, Rows(axis + i_label.axis, i_label.group))
  if i_label is not PUBLIC or p_label.axis == axis:
    return all_outputs(op, mixed(op, "a gather that picks examples"))
  shift = 0 if p_label.axis < axis else indices_rank - 1
  return all_outputs(op, Rows(p_label.axis + shift, p_label.group))


@register("ResourceGather")
def _resource_gather(op, inputs, forward):
  """An embedding lookup in a variable: rows by the indices' rows."""
  del forward
  label = inputs[1]
  if op.get_attr("batch_dims") or not isinstance(label, Rows):
    return all_outputs(op, mixed(op, "a batched variable lookup"))
  return all_outputs(op, label)


@register("GatherNd", "ResourceGatherNd")
def _gather_nd(op, inputs, forward):
  del forward
  p_label, i_label = inputs[0], inputs[1]
  r = rank(op.inputs[1])
  if p_label is PUBLIC and isinstance(i_label, Rows) and r is not None and (
      i_label.axis < r - 1):
    return all_outputs(op, i_label)
  return all_outputs(op, mixed(op, "a gather_nd that may pick examples"))


@register("OneHot")
def _one_hot(op, inputs, forward):
  del forward
  label = inputs[0]
  if not isinstance(label, Rows) or any(l is not PUBLIC for l in inputs[1:]):
    return all_outputs(op, mixed(op, "a one-hot of data-dependent depth"))
  axis = op.get_attr("axis")
  if axis == -1 or axis > label.axis:
    return all_outputs(op, label)
  return all_outputs(op, Rows(label.axis + 1, label.group))


@register("MatrixBandPart", "MatrixDiagPartV3", "MatrixDiagV3",
           "MatrixSetDiagV3", "MatrixDiagPart", "MatrixDiag",
           "MatrixTranspose")
def _matrix_op(op, inputs, forward):
  """Operations on the last two axes (or one, for a diagonal)."""
  del forward
  label = inputs[0]
  r = rank(op.inputs[0])
  if not isinstance(label, Rows) or r is None or any(
      l is not PUBLIC for l in inputs[1:]):
    return all_outputs(op, mixed(op, f"{op.type} of data-dependent arguments"))
  matrix_axes = 1 if op.type.startswith("MatrixDiagV") or (
      op.type == "MatrixDiag") else 2
  if label.axis >= r - matrix_axes:
    return all_outputs(op, mixed(op, f"{op.type} over the examples' axis"))
  out_rank = rank(op.outputs[0])
  if out_rank is None:
    return all_outputs(op, mixed(op, f"{op.type} of unknown rank"))
  return all_outputs(op, Rows(label.axis, label.group))
