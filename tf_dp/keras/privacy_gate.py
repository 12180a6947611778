"""The privacy gate: what the DP step proves before it uses a computation.

Per-example clipping bounds what one example adds to a lot only if the
clipped terms of the other examples do not depend on it. Both paths of the
DP step establish that from the traced computation itself, every time the
step is traced (a new ``fit``, a recompile, an unfrozen layer, a new input
signature, ``private_step`` in a new ``tf.function``), never from numbers:

* The exact path (``per_example_method="vectorized"``, or the fallback)
  runs the model and the loss on each record alone under
  ``tf.vectorized_map``: a record's gradient is a function of that record
  by construction.
* The fast path reads each record's rows of every tapped layer's inputs,
  outputs and output gradients. ``prove_fast_step`` labels every tensor of
  the traced forward pass, loss and backward pass by provenance
  (``tf_dp.core.provenance``): starting from the batch (``x``, ``y``,
  ``sample_weight``: rows by example), through an allowlist of operations
  known to keep examples apart. The fast path is used only when every
  tensor a rule reads is proven to hold rows by example on its first axis
  (or to depend on no example), and the per-example losses too.

What a proof cannot settle fails closed:

* an operation the allowlist does not know, rows that are not examples (a
  Dense on a time-major tensor), or a loss that combines examples: the
  step takes the exact path (the reason is logged);
* an operation of the model's forward pass that provably combines
  examples (a reduction of floating-point values over the batch axis, as a
  batch statistic does): the model is refused before any update, naming
  the layer;
* a write of a value that depends on the examples to any variable during
  the forward or backward pass (a running statistic): refused, naming the
  variable. Only ``DPBatchNormalization`` keeps statistics of the data,
  and it updates them from the noised release.

Trust boundary: the data enters the step through ``x``, ``y`` and
``sample_weight``; the model's code is trusted not to carry data between
calls outside TensorFlow (in Python attributes), and variables the step
does not write are public.
"""

from typing import (Any, Callable, Dict, Iterable, Iterator, List, NamedTuple,
                    Optional, Sequence, Tuple)

import numpy as np
import tensorflow as tf

from tf_dp.core.provenance import labels as labels_lib
from tf_dp.core.provenance import walker
from tf_dp.core.provenance.labels import PUBLIC
from tf_dp.core.provenance.labels import Rows
from tf_dp.errors import UnsupportedModelError
from tf_dp.keras import model_checks


# ``(what, tensors)``: tensors the fast rules read, named for messages.
_NamedTensors = Sequence[Tuple[str, Sequence[Any]]]


class NotProven(Exception):
  """The fast path cannot be proven for this trace (the reason): the step
  takes the exact path."""


MIXING_ERROR = (
    "Layer {layer} combines examples: {reason} (operation {op!r}), so one "
    "example's output depends on the other examples of the batch and "
    "per-example clipping would not bound what one example contributes. "
    "Replace it with a layer that treats each example on its own: for "
    "batch statistics, LayerNormalization, GroupNormalization "
    "(tf_dp.keras.with_group_normalization(model)) or "
    "tf_dp.keras.layers.DPBatchNormalization (tf_dp.keras.layers_keras2 "
    "for Keras 2). A BatchNormalization frozen with trainable=False, or "
    "called with training=False, normalises with its moving statistics "
    "and trains.")

STATE_WRITE_ERROR = (
    "Layer {layer} writes a value computed from the training data to "
    "variable {variable!r} during the training step (operation {op!r}, "
    "e.g. a running statistic): that variable would release an un-noised "
    "statistic of the data with the model's weights. Compute the statistic "
    "with tf_dp.keras.layers.DPBatchNormalization (noised, and accounted in "
    "the ledger), or keep the variable fixed during training.")


def batch_sources(*parts: Any) -> List[Tuple[tf.Tensor, Rows]]:
  """``(tensor, Rows(0))`` for every tensor of the batch's parts."""
  return [(t, Rows(0)) for part in parts if part is not None
          for t in tf.nest.flatten(part) if isinstance(t, tf.Tensor)]


def _layer_of(model: Any, op_name: str) -> str:
  """The layer an operation belongs to, from its name scope."""
  names = {layer.name: layer for layer in model_checks.all_layers(model)}
  for part in reversed(op_name.split("/")[:-1]):
    # Keras 3 opens a layer's name scope as "<name>_<k>" when traced again.
    layer = names.get(part) or names.get(part.rsplit("_", 1)[0])
    if layer is not None:
      return f"{layer.name!r} ({type(layer).__name__})"
  return f"of the model (scope {op_name.rsplit('/', 1)[0]!r})"


def _variable_name(model: Any, op: tf.Operation) -> str:
  """The name of the variable that ``op`` writes, as the model knows it."""
  for t in op.inputs:
    if t.dtype != tf.resource:
      continue
    outer = _captured(op.graph, t)
    for v in model.variables:
      handle = getattr(v, "handle", None)
      if handle is not None and (handle is outer or handle is t):
        return getattr(v, "path", None) or v.name
    return t.name
  return op.name


def _captured(graph: tf.Graph, placeholder: tf.Tensor) -> Optional[tf.Tensor]:
  """The outer tensor a function graph's placeholder captures, or None."""
  for outer, inner in getattr(graph, "captures", []):
    if inner is placeholder:
      return outer
  return None


def refuse_writes(model: Any, analysis: walker.Analysis) -> None:
  """Raises if the analysed computation wrote data to a variable."""
  if analysis.writes:
    op = analysis.writes[0]
    raise UnsupportedModelError(STATE_WRITE_ERROR.format(
        layer=_layer_of(model, op.name), variable=_variable_name(model, op),
        op=op.name))


def refuse_proven_mixing(model: Any,
                         label: Optional[labels_lib.Label]) -> None:
  """Raises if ``label`` is a proven mixing of examples."""
  if isinstance(label, labels_lib.Mixed) and label.proven:
    raise UnsupportedModelError(MIXING_ERROR.format(
        layer=_layer_of(model, label.op), reason=label.reason, op=label.op))


def _rows_by_example(label: labels_lib.Label) -> bool:
  return label is PUBLIC or (isinstance(label, Rows) and label.axis == 0)


def _labels(
    analysis: walker.Analysis,
    named_tensors: _NamedTensors) -> Iterator[Tuple[str, labels_lib.Label]]:
  """``(what, label)`` of every tensor among ``named_tensors``."""
  for what, tensors in named_tensors:
    for t in tensors:
      if isinstance(t, tf.Tensor):
        yield what, analysis.label(t)


def _proven_mixing(analysis: walker.Analysis,
                   named_tensors: _NamedTensors) -> Optional[labels_lib.Mixed]:
  """The first proven ``Mixed`` label among the tensors, or None."""
  for _, label in _labels(analysis, named_tensors):
    if isinstance(label, labels_lib.Mixed) and label.proven:
      return label
  return None


def _require(analysis: walker.Analysis, named_tensors: _NamedTensors,
             allow: Callable[[labels_lib.Label], bool]) -> None:
  """Raises ``NotProven`` for the first tensor whose label ``allow``
  refuses."""
  for what, label in _labels(analysis, named_tensors):
    if allow(label):
      continue
    if isinstance(label, labels_lib.Mixed):
      raise NotProven(f"the {what} may depend on several examples "
                      f"({label.reason}, operation {label.op!r})")
    raise NotProven(f"the rows of the {what} are not examples "
                    f"(laid out as {label})")


class TapLayout(NamedTuple):
  """Where one tap's tensors hold their examples: the axis of each
  flattened positional argument and of each flattened output gradient
  (None for a public tensor, or a non-tensor argument).

  ``summed``, per output gradient: None, or ``(g, axes)`` when the output
  is public and broadcast to every example (a position table added to each
  example's embeddings): its gradient is ``reduce_sum(g, axes)`` over the
  examples' axis 0 of ``g``, which holds rows by example; each record's
  share is that sum over the record's own rows.
  """
  arg_axes: List[Optional[int]]
  grad_axes: List[Optional[int]]
  summed: List[Optional[Tuple[tf.Tensor, Tuple[int, ...]]]]

  @property
  def summed_any(self) -> bool:
    return any(s is not None for s in self.summed)


def _axis(analysis: walker.Analysis, t: Any) -> Optional[int]:
  if not isinstance(t, tf.Tensor):
    return None
  label = analysis.label(t)
  return label.axis if isinstance(label, Rows) else None


def _summed_over_examples(
    analysis: walker.Analysis,
    grad: Any) -> Optional[Tuple[tf.Tensor, Tuple[int, ...]]]:
  """``(g, axes)`` if ``grad`` is ``reduce_sum(g, axes)`` (reshaped) of a
  ``g`` with rows by example on axis 0, summed over that axis: the gradient
  of a public tensor broadcast to every example. Else None."""
  if not isinstance(grad, tf.Tensor):
    return None
  t = grad
  while t.op.type in ("Reshape", "Identity"):
    t = t.op.inputs[0]
  if t.op.type != "Sum":
    return None
  g = t.op.inputs[0]
  label = analysis.label(g)
  axes = tf.get_static_value(t.op.inputs[1])
  if not (isinstance(label, Rows) and label.axis == 0) or axes is None or (
      g.shape.rank is None):
    return None
  axes = tuple(sorted({int(a) % g.shape.rank for a in np.ravel(axes)}))
  return (g, axes) if 0 in axes else None


def _broadcast_grads(
    analysis: walker.Analysis, tap: Any,
    grads: Any) -> List[Optional[Tuple[tf.Tensor, Tuple[int, ...]]]]:
  """Per flattened output gradient of a tap whose output is public: the
  ``_summed_over_examples`` form of its gradient, or None."""
  outputs = tf.nest.flatten(tap.output)
  return [_summed_over_examples(analysis, g)
          if isinstance(g, tf.Tensor) and isinstance(
              analysis.label(g), labels_lib.Mixed) and all(
              analysis.label(o) is PUBLIC for o in outputs
              if isinstance(o, tf.Tensor)) else None
          for g in tf.nest.flatten(grads)]


def _tap_layout(analysis: walker.Analysis, tap: Any,
                grads: Any) -> TapLayout:
  summed = _broadcast_grads(analysis, tap, grads)
  return TapLayout([_axis(analysis, a) for a in tf.nest.flatten(tap.args)],
                   [0 if s is not None else _axis(analysis, g)
                    for g, s in zip(tf.nest.flatten(grads), summed)],
                   summed)


class StepRegions:
  """Counts of a graph's operations at the boundaries of one traced step:
  the forward pass, the loss, and the backward pass to the taps."""

  def __init__(self, graph: tf.Graph) -> None:
    self.graph = graph
    self.marks: List[int] = [len(graph.get_operations())]

  def mark(self) -> None:
    """Closes the current region where the graph now ends."""
    self.marks.append(len(self.graph.get_operations()))

  def operations(self, index: int) -> Sequence[tf.Operation]:
    return walker.operations_between(self.graph, self.marks[index],
                                     self.marks[index + 1])


def analyse_step(regions: StepRegions,
                 sources: Iterable[Tuple[tf.Tensor, Rows]]) -> walker.Analysis:
  """Labels a traced step: region 0 is the model's forward pass (proven
  mixing possible), the others (loss, backward pass) are not."""
  analysis = walker.Analysis(sources)
  for index in range(len(regions.marks) - 1):
    analysis.walk(regions.operations(index), forward=index == 0)
  return analysis


def _alone_label(analysis: walker.Analysis, inputs: Any) -> labels_lib.Label:
  """The label of what a function that evaluates each example alone (under
  ``tf.vectorized_map``, mapping axis 0) computes from ``inputs``: rows by
  example if each input is public or holds rows by example on axis 0."""
  groups = set()
  for t in tf.nest.flatten(inputs):
    if not isinstance(t, tf.Tensor):
      continue
    label = analysis.label(t)
    if not _rows_by_example(label):
      return label if isinstance(label, labels_lib.Mixed) else (
          labels_lib.Mixed(t.op.name, t.op.type, f"an input of the loss "
                           f"laid out as {label}"))
    if isinstance(label, Rows):  # Not PUBLIC.
      groups.add(label.group)
  return Rows(0, groups.pop() if len(groups) == 1 else None)


def analyse_fast_step(regions: StepRegions,
                      sources: Iterable[Tuple[tf.Tensor, Rows]],
                      loss: Tuple[bool, Any, tf.Tensor, Sequence[tf.Tensor]]
                      ) -> walker.Analysis:
  """Labels a traced fast step of four regions: the forward pass, the loss,
  the loss's gradient with respect to the predictions, and the model's
  backward pass from it.

  ``loss`` is ``(alone, inputs, losses, prediction_grads)``: when ``alone``
  (a loss that evaluates each example alone by construction, as tf_dp's
  do: ``tf_dp.keras.losses``), its two regions are not walked: the losses
  and the gradients hold rows by example whenever its ``inputs`` do.
  """
  alone, inputs, losses, prediction_grads = loss
  if not alone:
    return analyse_step(regions, sources)
  analysis = walker.Analysis(sources)
  analysis.walk(regions.operations(0), forward=True)
  label = _alone_label(analysis, inputs)
  analysis.assign([losses] + list(prediction_grads), label)
  analysis.walk(regions.operations(3), forward=False)
  return analysis


def prove_fast_step(model: Any, analysis: walker.Analysis,
                    unit_taps: Sequence[Sequence[Any]],
                    unit_out_grads: Sequence[Sequence[Any]],
                    losses: tf.Tensor) -> Dict[int, TapLayout]:
  """Raises unless every tensor the fast rules read holds rows by example.

  Args:
    model: The Keras model.
    analysis: ``analyse_step`` of the traced forward, loss and backward.
    unit_taps: Per tapped layer, its taps (``tf_dp.keras.fast.taps.Tap``).
    unit_out_grads: Per tapped layer, its taps' output gradients.
    losses: The per-example losses.

  Returns:
    ``{index of the layer in unit_taps: TapLayout}`` for the layers whose
    tensors hold their examples on another axis than the first (a layer
    called on a time-major tensor): proven per example, they take the
    per-layer fallback that reads each example's rows where they are.

  Raises:
    UnsupportedModelError: for a data-dependent write to a variable, or an
      operation of the forward pass that provably combines examples on the
      way to what the rules read.
    NotProven: if a tensor the rules read is not proven to hold rows by
      example (the step then takes the exact path).
  """
  named = [("per-example losses", [losses])]
  for taps, grads in zip(unit_taps, unit_out_grads):
    for tap, grad in zip(taps, grads):
      name = tap.layer.name
      summed = _broadcast_grads(analysis, tap, grad)
      named += [(f"output of layer {name!r}", tf.nest.flatten(tap.output)),
                (f"input of layer {name!r}", tf.nest.flatten(tap.args)),
                (f"output gradient of layer {name!r}",
                 [g if s is None else s[0]
                  for g, s in zip(tf.nest.flatten(grad), summed)])]
  refuse_proven_mixing(model, _proven_mixing(analysis, named))
  refuse_writes(model, analysis)
  _require(analysis, named, lambda l: l is PUBLIC or isinstance(l, Rows))
  _require(analysis, named[:1], _rows_by_example)
  moved = {}
  for index, (taps, grads) in enumerate(zip(unit_taps, unit_out_grads)):
    layouts = [_tap_layout(analysis, tap, grad)
               for tap, grad in zip(taps, grads)]
    if all(a in (0, None) for layout in layouts
           for a in layout.arg_axes + layout.grad_axes) and not any(
               layout.summed_any for layout in layouts):
      continue
    if len(taps) != 1:
      raise NotProven(f"layer {taps[0].layer.name!r} is called "
                      f"{len(taps)} times on tensors whose examples are not "
                      f"on their first axis (or on a public input)")
    moved[index] = layouts[0]
  return moved


def check_exact_step(model: Any, loss_fn: Callable[..., Any], x: Any, y: Any,
                     sample_weight: Any) -> None:
  """The gate of the exact path: traces the batched forward pass and loss
  on the batch's signature (never runs them) and refuses a data-dependent
  write to a variable or a forward operation that provably combines
  examples (the exact path evaluates each record alone, so the model
  would not compute what it says).

  Args:
    model, loss_fn: The model and its per-example loss function.
    x, y, sample_weight: The batch (tensors, or their ``tf.TypeSpec``s).

  Raises:
    UnsupportedModelError: as ``prove_fast_step``.
  """
  specs = tf.nest.map_structure(_spec, (x, y, sample_weight))

  def forward(x: Any, y: Any, w: Any) -> tf.Tensor:
    graph = tf.compat.v1.get_default_graph()
    regions = StepRegions(graph)
    y_pred = model(x, training=True)
    regions.mark()
    losses = loss_fn(y, y_pred, w)
    regions.mark()
    analysis = analyse_step(regions, batch_sources(x, y, w))
    refuse_proven_mixing(model, analysis.label(losses))
    refuse_writes(model, analysis)
    return losses

  tf.function(forward, autograph=False).get_concrete_function(*specs)


def _spec(t: Any) -> Any:
  if t is None or isinstance(t, tf.TypeSpec):
    return t
  if isinstance(t, (tf.RaggedTensor, tf.SparseTensor)):
    return tf.type_spec_from_value(t)
  t = tf.convert_to_tensor(t)
  return tf.TensorSpec(t.shape, t.dtype)

