"""Rules for ``TensorList`` operations (the loops of recurrent layers): a
list is labelled by what its elements carry."""


from tf_dp.core.provenance.labels import join
from tf_dp.core.provenance.labels import ListOf
from tf_dp.core.provenance.labels import Mixed
from tf_dp.core.provenance.labels import PUBLIC
from tf_dp.core.provenance.labels import Rows
from tf_dp.core.provenance.registry import all_outputs
from tf_dp.core.provenance.registry import mixed
from tf_dp.core.provenance.registry import register


# --------------------------------------------------------------------------
# TensorLists (the loops of recurrent layers).


@register("TensorListFromTensor")
def _list_from_tensor(op, inputs, forward):
  del forward
  label = inputs[0]
  if not isinstance(label, Rows) or label.axis == 0:
    return all_outputs(op, mixed(op, "a list of the examples"))
  return all_outputs(op, ListOf(Rows(label.axis - 1, label.group)))


@register("TensorListStack", "TensorListConcatV2")
def _list_stack(op, inputs, forward):
  del forward
  label = inputs[0]
  if not isinstance(label, ListOf) or any(l is not PUBLIC for l in inputs[1:]):
    return all_outputs(op, mixed(op, "a stack of a data-dependent list"))
  element = label.element
  if element is PUBLIC:
    return [PUBLIC] * len(op.outputs)
  if not isinstance(element, Rows):  # A list's elements carry rows or none.
    return all_outputs(op, mixed(op, f"a stack of a list of {element}"))
  if op.type == "TensorListConcatV2":
    if element.axis == 0:
      return all_outputs(op, mixed(op, "a concatenation of examples' rows"))
    return [element] + [PUBLIC] * (len(op.outputs) - 1)
  return all_outputs(op, Rows(element.axis + 1, element.group))


@register("TensorListGetItem", "TensorListPopBack")
def _list_get(op, inputs, forward):
  del forward
  label = inputs[0]
  if not isinstance(label, ListOf) or any(l is not PUBLIC for l in inputs[1:]):
    return all_outputs(op, mixed(op, "a data-dependent list index"))
  if op.type == "TensorListPopBack":
    return [label, label.element]
  return [label.element]


@register("TensorListSetItem", "TensorListPushBack")
def _list_set(op, inputs, forward):
  del forward
  lst, item = inputs[0], inputs[-1] if op.type == "TensorListPushBack" else (
      inputs[2])
  if op.type == "TensorListSetItem" and inputs[1] is not PUBLIC:
    return all_outputs(op, mixed(op, "a data-dependent list index"))
  element = PUBLIC if lst is PUBLIC else (
      lst.element if isinstance(lst, ListOf) else None)
  if element is None:
    return all_outputs(op, mixed(op, f"a list laid out as {lst}"))
  joined = join(element, item, op.name, op.type)
  return all_outputs(op, joined if isinstance(joined, Mixed) else ListOf(joined))


@register("TensorListReserve", "EmptyTensorList")
def _list_new(op, inputs, forward):
  del inputs, forward
  return all_outputs(op, ListOf(PUBLIC))
