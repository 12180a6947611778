"""The rule for reshapes: whether each example's entries stay in whole
rows of one output axis, with the sizes involved as monomials
(``tf_dp.core.provenance.shapes``)."""

from typing import List, Optional

from tf_dp.core.provenance.labels import EXAMPLES
from tf_dp.core.provenance.labels import Interleaved
from tf_dp.core.provenance.labels import Label
from tf_dp.core.provenance.labels import Monomial
from tf_dp.core.provenance.labels import product
from tf_dp.core.provenance.labels import Rows
from tf_dp.core.provenance.labels import Size
from tf_dp.core.provenance.registry import all_outputs
from tf_dp.core.provenance.registry import context
from tf_dp.core.provenance.registry import has_axis
from tf_dp.core.provenance.registry import mixed
from tf_dp.core.provenance.registry import register
from tf_dp.core.provenance.registry import same_size
from tf_dp.core.provenance.registry import static_dims


def _is_one(size: Size) -> bool:
  return size is not None and size.is_one


def reshaped(label: Rows, in_sizes: Optional[List[Size]],
             target: List[Size]) -> Optional[Rows]:
  """The layout of a reshape of a ``Rows`` tensor of axis sizes
  ``in_sizes`` to axis sizes ``target`` (None: unknown; coefficient -1:
  inferred), if each example's entries stay in whole rows of one output
  axis, in order; else None.

  A reshape keeps the row-major order of the entries. With only size-1
  axes before the examples' axis, example i's entries are the i-th block
  of ``E = group * (product of the later axes)`` entries. The output keeps
  them apart if its first axis that is not of size 1 has ``N * g`` entries
  (a multiple of the number of examples: then ``g`` rows of it hold each
  block, by counting entries), or if the product of the axes after it
  divides ``E`` (then ``E`` over that product rows hold each block).
  """
  axis = label.axis
  prefix = in_sizes[:axis] if in_sizes is not None else [None] * axis
  if not all(size is not None and size.is_one for size in prefix):
    # Axes before the examples': only a reshape that keeps them as they
    # are and reshapes the later axes keeps examples apart.
    if in_sizes is None or None in prefix or target[:axis] != prefix:
      return None
    inner = reshaped(Rows(0, label.group), in_sizes[axis:], target[axis:])
    return None if inner is None else Rows(inner.axis + axis, inner.group)
  out_axis = 0
  while out_axis < len(target) and _is_one(target[out_axis]):
    out_axis += 1
  if out_axis >= len(target):
    return None
  first = target[out_axis]
  if first is not None and first.counts_examples:
    return Rows(out_axis, first.divided_by(Monomial(1, (EXAMPLES,))))
  if in_sizes is None:
    return None
  block = product([label.group] + in_sizes[axis + 1:])
  later = product(target[out_axis + 1:])
  if block is None or later is None:
    return None
  group = block.divided_by(later)
  return None if group is None else Rows(out_axis, group)


def interleaved_by_reshape(label: Label, in_sizes: Optional[List[Size]],
                          target: List[Size]) -> Optional[Label]:
  """A reshape between rows by example behind other axes and interleaved
  rows, or None.

  ``[P..., N, R...] -> [P * N, R']`` (one row per example, ``prod(R') =
  prod(R)``) puts example i's rows at ``k * N + i``: ``Interleaved`` with
  ``P`` blocks (a time-major tensor flattened, as ``tf.tensordot`` does);
  ``[P * N, R] -> [P, N, R']`` undoes it.
  """
  if in_sizes is None or not isinstance(label, (Rows, Interleaved)):
    return None
  out_axis = 0
  while out_axis < len(target) and _is_one(target[out_axis]):
    out_axis += 1
  examples = Monomial(1, (EXAMPLES,))
  rest_in = product(in_sizes[label.axis + 1:])
  if isinstance(label, Rows) and label.group is not None and (
      label.group.is_one):
    outer = product(in_sizes[:label.axis])
    if outer is None or outer.is_one or out_axis >= len(target):
      return None
    rest_out = product(target[out_axis + 1:])
    first = target[out_axis]
    if same_size(rest_out, rest_in) and first is not None and (
        same_size(first, outer * examples) or first.coefficient == -1):
      return Interleaved(out_axis, outer)
    return None
  if isinstance(label, Interleaved) and all(
      s is not None and s.is_one for s in in_sizes[:label.axis]) and (
          out_axis + 1 < len(target)) and same_size(target[out_axis],
                                                    label.outer):
    after = target[out_axis + 1]
    if same_size(after, examples) or (
        after is not None and after.coefficient == -1 and same_size(
            product(target[out_axis + 2:]), rest_in)):
      return Rows(out_axis + 1)
  return None


def _reshape_target(op) -> Optional[List[Size]]:
  """The sizes a reshape produces: the shape argument's value where the
  graph shows it, else what TensorFlow inferred."""
  static = static_dims(op.outputs[0])
  value = context().shapes.value(op.inputs[1])
  if value is None or (static is not None and len(value) != len(static)):
    return None if static is None else [
        None if d is None else Monomial(d) for d in static]
  if static is not None:
    value = [Monomial(d) if (v is None or v.coefficient <= 0) and (
        d is not None) else v for v, d in zip(value, static)]
  return value


@register("Reshape")
def _reshape(op, inputs, forward):
  del forward
  label = inputs[0]
  in_sizes = context().shapes.sizes(op.inputs[0])
  target = _reshape_target(op)
  if not has_axis(label) or target is None:
    return all_outputs(op, mixed(op, "a reshape of unknown shape"))
  result = (reshaped(label, in_sizes, target) if isinstance(label, Rows)
            else None) or interleaved_by_reshape(label, in_sizes, target)
  if result is None:
    return all_outputs(op, mixed(op, f"a reshape from {op.inputs[0].shape} to "
                           f"{op.outputs[0].shape} that may put several "
                           f"examples in one row"))
  return all_outputs(op, result)
