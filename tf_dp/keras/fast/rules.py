"""The registry of per-layer rules: per-record squared gradient norms and
clipped sums of one layer's trainable variables.

A rule answers for one layer class (``rule_types.Rule``):
  * ``supports(layer)``: can it handle this configuration?
  * ``pre_activation``: tap z before the activation (Dense, Conv, ...).
  * ``variables(layer)``: the variables it accounts for.
  * ``prepare(layer, tap, out_grad, records)``: per-record tensors (the
    tap's floating tensors and ``out_grad`` arrive in float32 unless the
    rule sets ``float32_taps = False``, ``rule_types.TapDtypeRule``; norms
    and sums are float32).
  * ``sq_norms(state)``: ``[R]`` squared norm per variable.
  * ``clipped_sums(state, scales, keep)``: ``sum_r scales_v[r] * grad_v[r]``
    per variable (records to drop have ``keep`` false and are masked, so
    NaN or inf in a dropped record cannot leak into the sum).
  * optionally ``prepare_calls(layer, taps, out_grads, records)``
    (``rule_types.MultiCallRule``): the state of a layer called several
    times in one forward pass, whose per-record gradient is the sum over its
    calls (shared layers, tied embeddings); without it such a layer makes
    the fast path unavailable.

Rules are looked up by class. A subclass uses its parent's rule only if
neither it nor any class between it and the parent defines anything but
construction and metadata (``_NEUTRAL_NAMES``: ``__init__``, ``get_config``,
shape inference, docstrings): its forward pass is then the parent's
``call`` on the parent's attributes, which the rule reads. A subclass that
defines ``call``, ``build``, a property or any helper does not inherit the
rule (its name never matters); register one with ``register_rule(MyLayer,
rule)``, or decorate the rule's class with ``@register_rule_class(MyLayer)``.
Layers without a rule get ``LocalVectorizedRule`` (exact, slower).

A layer whose trainable variables all belong to its sublayers (a
transformer block, MultiHeadAttention) needs no rule: the fast path taps
its sublayers instead (``clipped_sum.trainable_units``), unless a rule
is registered for its class. ``register_composite`` makes the fast path tap
the sublayers of a class even then.

Privacy does not depend on a rule describing the layer correctly: each
record adds to the clipped sum what the rule computes from that record's
taps, and the rule's norm bounds exactly that. A rule that does not
describe the layer gives a wrong gradient, never an unclipped one.

Built-in rules (Keras 3 and Keras 2 classes, registered on first use
once that flavour is imported):
Dense, EinsumDense and Embedding (with or without LoRA), Conv1D/2D/3D,
DepthwiseConv2D, SeparableConv2D, Conv2DTranspose, LayerNormalization,
GroupNormalization, ReversibleEmbedding (tied or not, called any number of
times); KerasHub's PositionEmbedding, RMSNormalization and ViTPatchingAndEmbedding
layers once ``keras_hub`` is imported.
"""

import sys
from typing import Any, Callable, Dict, Iterable, List, Optional, Set, Tuple
from typing import TypeVar

import tensorflow as tf

from tf_dp.keras import backend
from tf_dp.keras import per_example
from tf_dp.keras.fast import einsum_rule
from tf_dp.keras.fast import embedding_rules
from tf_dp.keras.fast import linear
from tf_dp.keras.fast import rule_types
from tf_dp.keras.fast import taps as taps_lib

_REGISTRY = rule_types.RuleRegistry()
# The flavours (adapter names) whose built-in rules are registered.
_FLAVOURS_REGISTERED: Set[str] = set()
_KERAS_HUB_REGISTERED = False


def register_rule(layer_class: type, rule: rule_types.Rule[Any]) -> None:
  """Registers ``rule`` for layers whose type is exactly ``layer_class``.

  Args:
    layer_class: A Keras layer class (not a name; subclasses are not
      covered: register them explicitly).
    rule: An object with the rule interface (``rule_types.Rule``; see this
      module's docstring).

  Raises:
    TypeError: if ``layer_class`` is not a class.
  """
  _ensure_builtins()
  _REGISTRY.add(layer_class, rule)


_RuleClass = TypeVar("_RuleClass", bound=type)


def register_rule_class(*layer_classes: type
                        ) -> Callable[[_RuleClass], _RuleClass]:
  """A class decorator: registers an instance of the decorated rule class
  (built without arguments) for layers of exactly each of
  ``layer_classes``, as ``register_rule`` does.

  Raises:
    TypeError: if one of ``layer_classes`` is not a class.

  Example:
    >>> @tf_dp.keras.fast.register_rule_class(MyDense)
    ... class MyDenseRule(tf_dp.keras.fast.rules.DenseRule):
    ...   pass
  """
  _ensure_builtins()
  return _REGISTRY.rule_class(*layer_classes)


def register_composite(layer_class: type) -> None:
  """Taps the sublayers of layers of exactly this class, not the layer
  (needed only for a class that has a rule: a layer whose trainable
  variables all belong to sublayers is tapped through them anyway)."""
  _REGISTRY.add_composite(layer_class)


def is_composite(layer: Any) -> bool:
  _ensure_builtins()
  return _REGISTRY.is_composite(type(layer))


# What a subclass may define and still compute what its parent's call
# computes: construction (the rule reads the attributes __init__ sets, as
# the parent's call does), configuration, shape inference and metadata.
_NEUTRAL_NAMES = frozenset({
    "__module__", "__qualname__", "__doc__", "__dict__", "__weakref__",
    "__firstlineno__", "__static_attributes__", "__annotations__",
    "__orig_bases__", "__parameters__", "__init__", "get_config",
    "from_config", "compute_output_shape", "compute_output_spec",
    "_api_export_path", "_api_export_symbol_id",
})


def ruled_class(cls: type) -> Optional[type]:
  """The class whose rule describes layers of class ``cls``, or None.

  That is ``cls`` itself if it has a rule, else its nearest ancestor with a
  rule provided every class on the way defines only ``_NEUTRAL_NAMES``.
  """
  _ensure_builtins()
  for klass in cls.__mro__:
    if klass in _REGISTRY:
      return klass
    if set(vars(klass)) - _NEUTRAL_NAMES:
      return None
  return None


def rule_for(layer: Any) -> Optional[rule_types.Rule[Any]]:
  """The rule for ``layer``'s class (``ruled_class``) if it supports the
  layer, else None. A layer whose ``call`` was replaced on the instance
  has no rule."""
  klass = ruled_class(type(layer))
  if klass is None or "call" in vars(layer):
    return None
  rule = _REGISTRY.get(klass)
  if rule is not None and rule.supports(layer):
    return rule
  return None


class DenseRule(einsum_rule.LoraMixin, linear.LinearRule):
  """keras.layers.Dense (any input rank: leading axes are positions), with
  or without LoRA."""

  def lora_specs_for(self, layer: Any,
                     x_rank: Optional[int]) -> Tuple[str, str, str]:
    # Dense as an einsum (inp, ker, out) for an input of rank x_rank.
    letters = "abcdefghij"[:x_rank or 2]
    return letters, letters[-1] + "z", letters[:-1] + "z"

  def kernel_rows(self, layer: Any, x: tf.Tensor, g: tf.Tensor,
                  records: linear.Records) -> Tuple[tf.Tensor, tf.Tensor]:
    return linear.per_record(x, records), linear.per_record(g, records)

  def kernel_sum(self, layer: Any, x: tf.Tensor, g: tf.Tensor) -> tf.Tensor:
    return linear.matmul_kernel_sum(x, g)


# Per tensor, the axis holding its examples (None: a public tensor).
_Axes = List[Optional[int]]


def _records_first(t: tf.Tensor, axis: int,
                   records: linear.Records) -> tf.Tensor:
  """``t`` with its examples' axis ``axis`` moved first and split into
  ``[records, examples per record, ...]``."""
  t = tf.convert_to_tensor(t)
  if axis:
    t = tf.experimental.numpy.moveaxis(t, axis, 0)
  return tf.reshape(t, tf.concat([[records, -1], tf.shape(t)[1:]], 0))


def _record_in_place(t: tf.Tensor, axis: Optional[int]) -> tf.Tensor:
  """One record of ``_records_first``, its examples' axis put back."""
  return tf.experimental.numpy.moveaxis(t, 0, axis) if axis else t


class LocalVectorizedRule:
  """Any other layer: per-record VJP of this layer alone, vectorised.

  The layer is re-run on each record's inputs inside ``tf.vectorized_map``
  and differentiated with that record's output gradient: exactly the
  per-record gradient, at the cost of this layer only.

  Args:
    original_call: The layer's ``call``.
    layout: Where each positional argument and output gradient holds its
      examples (``tf_dp.keras.privacy_gate.TapLayout``: an axis, or None
      for a public tensor passed whole); by default the first axis of
      every tensor.
    without_activation: Re-run the layer without its activation (its tap
      recorded the pre-activation output).
  """

  pre_activation = False
  # The layer is re-run on its own inputs, in its own dtype; the per-record
  # gradients are cast to float32 afterwards.
  float32_taps = False

  def __init__(self, original_call: Callable[..., Any], layout: Any = None,
               without_activation: bool = False) -> None:
    # Keras runs layer calls without autograph; so must we (autograph
    # breaks e.g. the while loops of RNN layers under vectorized_map).
    self._call = tf.autograph.experimental.do_not_convert(original_call)
    self._layout = layout
    self._without_activation = without_activation

  def supports(self, layer: Any) -> bool:
    return True  # Any layer: it re-runs the layer's own call.

  def variables(self, layer: Any) -> List[Any]:
    return list(layer.trainable_variables)

  def _axes(self, flat_args: List[Any],
            flat_grads: List[Any]) -> Tuple[_Axes, _Axes]:
    if self._layout is None:
      first = lambda ts: [0 if tf.is_tensor(t) else None for t in ts]
      return first(flat_args), first(flat_grads)
    return self._layout.arg_axes, self._layout.grad_axes

  def _grads_by_example(self,
                        flat_grads: List[Any]) -> Tuple[List[Any], List[Any]]:
    """The output gradients to split by record: a public output broadcast
    to every example contributes the unsummed gradient (each record sums
    its own rows, ``_record_grad``)."""
    if self._layout is None:
      return flat_grads, [None] * len(flat_grads)
    summed = self._layout.summed
    return ([g if s is None else s[0] for g, s in zip(flat_grads, summed)],
            [None if s is None else s[1] for s in summed])

  def _run(self, layer: Any, args: Any, kwargs: Dict[str, Any]) -> Any:
    """The layer's call on one record, without its add_loss terms (not part
    of a record's gradient: the train step adds them from a public input)
    and, if asked, without its activation."""
    layer.add_loss = lambda *unused_args, **unused_kwargs: None
    activation = getattr(layer, "activation", None)
    if self._without_activation:
      layer.activation = None
    try:
      return self._call(*args, **kwargs)
    finally:
      del layer.add_loss
      if self._without_activation:
        layer.activation = activation

  def prepare(self, layer: Any, tap: taps_lib.Tap, out_grad: Any,
              records: linear.Records) -> rule_types.PerRecordGradients:
    variables = self.variables(layer)
    flat_args, flat_grads = tf.nest.flatten(tap.args), tf.nest.flatten(
        out_grad)
    arg_axes, grad_axes = self._axes(flat_args, flat_grads)
    by_example, summed_axes = self._grads_by_example(flat_grads)
    out_shapes = [tf.shape(g) if tf.is_tensor(g) else None
                  for g in flat_grads]
    split = lambda ts, axes: [
        None if axis is None or not tf.is_tensor(t) else
        _records_first(t, axis, records) for t, axis in zip(ts, axes)]
    split_args, split_grads = split(flat_args, arg_axes), split(by_example,
                                                                grad_axes)
    mapped = ([t for t in split_args if t is not None],
              [t for t in split_grads if t is not None])
    kwargs = tap.kwargs

    def rejoin(whole: List[Any], parts: List[Any], axes: _Axes,
               record: Iterable[tf.Tensor]) -> List[Any]:
      record = iter(record)
      return [t if part is None else _record_in_place(next(record), axis)
              for t, part, axis in zip(whole, parts, axes)]

    def one(inputs: Any) -> List[tf.Tensor]:
      rec_args = tf.nest.pack_sequence_as(
          tap.args, rejoin(flat_args, split_args, arg_axes, inputs[0]))
      rec_grads = rejoin(flat_grads, split_grads, grad_axes, inputs[1])
      rec_grad = tf.nest.pack_sequence_as(out_grad, [
          g if axes is None else tf.reshape(tf.reduce_sum(g, axes), shape)
          for g, axes, shape in zip(rec_grads, summed_axes, out_shapes)])
      with tf.GradientTape() as tape:
        out = self._run(layer, rec_args, kwargs)
      grads = tape.gradient(out, variables, output_gradients=rec_grad)
      return [tf.zeros(v.shape, tf.as_dtype(v.dtype)) if gr is None
              else tf.convert_to_tensor(gr) for gr, v in zip(grads, variables)]

    per_record = per_example.map_records(
        one, mapped, loop=per_example.is_masked_rnn(layer, kwargs.get("mask")))
    return rule_types.PerRecordGradients(
        [tf.cast(p, tf.float32) for p in per_record])

  def sq_norms(self, state: rule_types.PerRecordGradients
               ) -> List[tf.Tensor]:
    # What each record adds is these tensors: float64 sums of squares
    # raised by the cast margin never fall below their squared norms.
    return [linear.exact_sq_norms(p) for p in state.per_record]

  def clipped_sums(self, state: rule_types.PerRecordGradients,
                   scales: List[tf.Tensor],
                   keep: tf.Tensor) -> List[tf.Tensor]:
    return [tf.tensordot(s, linear.mask(p, keep), axes=[[0], [0]])
            for p, s in zip(state.per_record, scales)]


def _ensure_builtins() -> None:
  """Registers the built-in rules of each Keras flavour once it is
  imported, and KerasHub's once it is imported (neither is imported here:
  a model made of a flavour's or of KerasHub's layers has imported it)."""
  global _KERAS_HUB_REGISTERED
  # pylint: disable=g-import-not-at-top
  from tf_dp.keras.fast import conv_rules
  from tf_dp.keras.fast import norm_rules
  from tf_dp.keras.fast import patch_rules
  # pylint: enable=g-import-not-at-top
  register = _REGISTRY.add
  new = [a for a in backend.imported() if a.NAME not in _FLAVOURS_REGISTERED]
  if new:
    _FLAVOURS_REGISTERED.update(a.NAME for a in new)
    modules = [adapter.imported_module() for adapter in new]
    for keras in modules:
      register(keras.layers.Dense, DenseRule())
      register(keras.layers.Embedding, embedding_rules.EmbeddingRule())
    for module in (conv_rules, einsum_rule, norm_rules, embedding_rules):
      module.register_all(register, modules)
  keras_hub = sys.modules.get("keras_hub")
  if (not _KERAS_HUB_REGISTERED and keras_hub is not None
      and hasattr(keras_hub, "layers")):
    _KERAS_HUB_REGISTERED = True
    for module in (norm_rules, embedding_rules, patch_rules):
      module.register_keras_hub(register, keras_hub)
