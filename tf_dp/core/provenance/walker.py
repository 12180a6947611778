"""Labels every tensor of a traced computation, operation by operation.

``Analysis`` walks operations in the order they were created (an order in
which every input is made before its consumers), gives each output a label
(``tf_dp.core.provenance.labels``) from its inputs' labels by the rules of
``tf_dp.core.provenance.op_rules``, and analyses the bodies of function
calls and of control flow (``If``, ``Case``, ``While``: to a fixed point
of the loop variables' labels) the same way. A tensor made before the
walked operations, or outside them, is public unless it is a source.

It also lists the operations that may write a resource (a variable) from
a value that depends on the examples: a training step that did so would
keep an un-noised statistic of the data in the model.
"""

from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import tensorflow as tf
from tensorflow.python.ops import control_flow_util_v2  # pylint: disable=g-direct-tensorflow-import

from tf_dp.core.provenance import op_rules
from tf_dp.core.provenance.labels import join
from tf_dp.core.provenance.labels import Label
from tf_dp.core.provenance.labels import Mixed
from tf_dp.core.provenance.labels import PUBLIC

_CALLS = ("PartitionedCall", "StatefulPartitionedCall")
_CONDITIONALS = ("If", "StatelessIf")
_CASES = ("Case", "StatelessCase")
_LOOPS = ("While", "StatelessWhile")
# A loop's labels reach a fixed point in at most a few rounds (each round
# can only move a label up the short lattice PUBLIC < Rows < Mixed).
_MAX_LOOP_ROUNDS = 8


def _func_graph(op, attr, inputs):
  """The function graph of ``op``'s function-valued attribute ``attr``."""
  name = op.get_attr(attr).name
  graph = op.graph
  while graph is not None:
    func = graph._get_function(name)  # pylint: disable=protected-access
    if func is not None:
      body = getattr(func, "graph", None)
      if body is not None:
        return body
      break
    graph = getattr(graph, "outer_graph", None)
  return control_flow_util_v2.get_func_graph(
      op, [t.shape for t in inputs], name)


class Analysis:
  """The labels of a computation's tensors and its data-dependent writes.

  Args:
    sources: ``(tensor, label)`` pairs: the tensors that carry the
      examples.
  """

  def __init__(self, sources: Iterable[Tuple[tf.Tensor, Label]],
               examples: Optional[int] = None) -> None:
    sources = list(sources)
    self._labels: Dict[object, Label] = {
        t.ref(): label for t, label in sources}
    self.writes: List[tf.Operation] = []
    if examples is None:
      examples = _static_examples(sources)
    self._examples = examples
    self._context = op_rules.Context(self.label, examples)
    self._bodies: Dict[Tuple, Tuple[List[Label], List[tf.Operation]]] = {}

  def label(self, t: tf.Tensor) -> Label:
    """The label of ``t`` (public if nothing labelled it)."""
    return self._labels.get(t.ref(), PUBLIC)

  def assign(self, tensors: Iterable[tf.Tensor], label: Label) -> None:
    """Labels ``tensors`` by an argument made outside the walk."""
    for t in tensors:
      self._labels[t.ref()] = label

  def walk(self, operations: Iterable[tf.Operation], forward: bool) -> None:
    """Labels the outputs of ``operations`` (in creation order).

    ``forward`` marks operations of the model's forward pass, where an
    operation that certainly combines examples is a proven mixing.
    """
    with op_rules.in_context(self._context):
      for op in operations:
        self._visit(op, forward)

  def _visit(self, op, forward):
    inputs = [self.label(t) for t in op.inputs]
    try:
      outputs = self._outputs(op, inputs, forward)
    except (KeyError, ValueError, TypeError, IndexError, AttributeError,
            tf.errors.OpError) as e:
      # Fail closed: an operation the analysis cannot read (a function body
      # it cannot rebuild, an attribute of an unexpected form) is Mixed.
      if all(label is PUBLIC for label in inputs):
        outputs = [PUBLIC] * len(op.outputs)
      else:
        outputs = [Mixed(op.name, op.type, f"the analysis could not read "
                         f"this operation ({type(e).__name__})")] * len(
                             op.outputs)
      if any(t.dtype == tf.resource for t in op.inputs) and any(
          label is not PUBLIC for label in inputs):
        self.writes.append(op)
    for t, label in zip(op.outputs, outputs):
      if label is not PUBLIC:
        self._labels[t.ref()] = label

  def _outputs(self, op, inputs, forward):
    """The labels of ``op``'s outputs (see ``walk``)."""
    if op.type in _CALLS:
      return self._call(op, "f", list(op.inputs), inputs, forward)
    if op.type in _CONDITIONALS:
      return self._branches(op, ["then_branch", "else_branch"], inputs,
                            forward)
    if op.type in _CASES:
      return self._branches(op, ["branches"], inputs, forward)
    if op.type in _LOOPS:
      return self._loop(op, inputs, forward)
    outputs = op_rules.output_labels(op, inputs, forward)
    if op_rules.writes_state(op) and op_rules.data_inputs(op, inputs):
      self.writes.append(op)
    return outputs

  def _body(self, op, body, inputs, forward):
    """Output labels of function graph ``body`` called with ``inputs``."""
    key = (id(body), tuple(inputs), forward)
    if key not in self._bodies:
      sub = Analysis([(t, label) for t, label in zip(body.inputs, inputs)
                      if label is not PUBLIC], self._examples)
      sub.walk(body.get_operations(), forward)
      self._bodies[key] = ([sub.label(t) for t in body.outputs], sub.writes)
    outputs, writes = self._bodies[key]
    # A write inside a body stands for the call that runs it.
    self.writes.extend(op for _ in writes[:1])
    return outputs

  def _call(self, op, attr, tensors, inputs, forward):
    if all(label is PUBLIC for label in inputs):
      return [PUBLIC] * len(op.outputs)
    body = _func_graph(op, attr, tensors)
    return self._body(op, body, inputs, forward)

  def _branches(self, op, attrs, inputs, forward):
    if all(label is PUBLIC for label in inputs):
      return [PUBLIC] * len(op.outputs)
    if inputs[0] is not PUBLIC:
      chosen = inputs[0] if isinstance(inputs[0], Mixed) else Mixed(
          op.name, op.type, "a branch chosen by the data")
      return [chosen] * len(op.outputs)
    tensors, labels = list(op.inputs[1:]), inputs[1:]
    names = []
    for attr in attrs:
      value = op.get_attr(attr)
      names.extend(value if isinstance(value, list) else [value])
    outputs: Optional[List[Label]] = None
    for name in names:
      body = _branch_graph(op, name, tensors)
      result = self._body(op, body, labels, forward)
      outputs = result if outputs is None else [
          join(a, b, op.name, op.type) for a, b in zip(outputs, result)]
    return outputs

  def _loop(self, op, inputs, forward):
    if all(label is PUBLIC for label in inputs):
      return [PUBLIC] * len(op.outputs)
    tensors = list(op.inputs)
    cond = _func_graph(op, "cond", tensors)
    body = _func_graph(op, "body", tensors)
    labels = list(inputs)
    for _ in range(_MAX_LOOP_ROUNDS):
      after = self._body(op, body, labels, forward)
      joined = [join(a, b, op.name, op.type) for a, b in zip(labels, after)]
      if joined == labels:
        break
      labels = joined
    else:
      return [Mixed(op.name, op.type, "loop variables without a fixed "
                    "layout")] * len(op.outputs)
    if self._body(op, cond, labels, forward)[0] is not PUBLIC:
      return [Mixed(op.name, op.type, "a loop whose length depends on the "
                    "data")] * len(op.outputs)
    return labels


def _static_examples(sources) -> Optional[int]:
  """The number of examples, if every source's example axis has the same
  size known when tracing (a batch of fixed size: an input signature)."""
  sizes = set()
  for t, label in sources:
    axis = getattr(label, "axis", None)
    if axis is None or t.shape.rank is None:
      return None
    sizes.add(t.shape[axis])
  return sizes.pop() if len(sizes) == 1 and None not in sizes else None


def _branch_graph(op, func, tensors):
  """The graph of one branch function (a ``NameAttrList``) of ``op``."""
  graph = op.graph
  while graph is not None:
    found = graph._get_function(func.name)  # pylint: disable=protected-access
    if found is not None:
      body = getattr(found, "graph", None)
      if body is not None:
        return body
      break
    graph = getattr(graph, "outer_graph", None)
  return control_flow_util_v2.get_func_graph(
      op, [t.shape for t in tensors], func.name)


def operations_between(graph: tf.Graph, start: int,
                       end: Optional[int] = None) -> Sequence[tf.Operation]:
  """The operations of ``graph`` created between two counts of its
  operations (``len(graph.get_operations())`` taken before and after)."""
  return graph.get_operations()[start:end]
