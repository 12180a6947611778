"""The clipped sum of per-record gradients without per-example backprop.

Algorithm (one batched forward, two cheap passes):

1. Forward the batch once, tapping every layer that owns trainable
   variables (``taps.py``); per-record losses are the mean of the record's
   per-example losses.
2. One backward pass to the tapped outputs gives, for every layer, each
   record's output gradient. The privacy gate
   (``tf_dp.keras.privacy_gate.prove_fast_step``) then proves, from the
   traced graph, that every tensor a rule reads holds rows by example;
   otherwise the step takes the exact path (or the model is refused).
3. Each layer's rule gives every record's squared gradient norm per
   variable (ghost norm, materialised, or a local vectorised VJP).
4. The ``DPQuery`` turns norms into per-record scale factors
   (``record_scales``), exactly the scaling ``preprocess_record`` applies.
5. Each layer's rule forms ``sum_r scale_r * grad_r`` (masking records whose
   norm is not finite), and the query assembles the preprocessed sum.

Steps 3 to 5 run in float32 whatever the layers' compute dtype: the forward
and backward passes run in the model's dtype policy (e.g. bfloat16), the
taps are cast to float32 before the rules read them.

The result equals summing ``preprocess_record`` over per-record gradients
from ``tf.vectorized_map`` (tests check 1e-5), at a cost close to one
ordinary training step.
"""

import contextlib
from typing import (Any, Callable, Dict, FrozenSet, Iterable, List, NamedTuple,
                    Optional, Sequence, Set, Tuple, Type)

import tensorflow as tf

from tf_dp.core import lot as lot_lib
from tf_dp.errors import UnsupportedModelError
from tf_dp.keras import backend
from tf_dp.keras import dp_batch_norm
from tf_dp.keras import model_checks
from tf_dp.keras import per_example
from tf_dp.keras import privacy_gate
from tf_dp.keras.fast import gradient_presence
from tf_dp.keras.fast import linear
from tf_dp.keras.fast import rule_types
from tf_dp.keras.fast import rules as rules_lib
from tf_dp.keras.fast import taps as taps_lib


FastPathUnavailable = linear.FastPathUnavailable
Rule = rule_types.Rule[Any]
# Per unit (by layer id), its registered rule, or None.
FoundRules = Dict[int, Optional[Rule]]


def is_model(layer: Any) -> bool:
  """Whether ``layer`` is a Keras model (it has layers and compiles)."""
  return hasattr(layer, "layers") and hasattr(layer, "compile")


def _sublayers(layer: Any) -> List[Any]:
  if is_model(layer):
    return layer.layers
  return backend.for_object(layer).sublayers(layer)


def trainable_of(layer: Any, trainable: Set[int]) -> List[Any]:
  """The variables of ``layer`` (its sublayers' included) whose ids are in
  ``trainable``: the model's trainable variables, the source of truth (a
  Keras 3 layer set non-trainable lists none of its own, yet a sublayer
  set trainable again, as KerasHub's ``enable_lora`` does, is trained)."""
  return [v for v in layer.variables if id(v) in trainable]


def owns_trainable_variables(layer: Any, trainable: Set[int]) -> bool:
  """Whether ``layer`` holds trainable variables that none of its
  sublayers holds (its own weights, as opposed to its sublayers')."""
  held = {id(v) for sub in _sublayers(layer) for v in sub.variables}
  return any(id(v) not in held for v in trainable_of(layer, trainable))


def _tapped_through_sublayers(layer: Any, trainable: Set[int]) -> bool:
  """Models, registered composites, and layers without a rule whose
  trainable variables all belong to sublayers (transformer blocks,
  MultiHeadAttention and its subclasses): whatever class they are."""
  if is_model(layer) or rules_lib.is_composite(layer):
    return True
  # A recurrent layer calls its cell inside a loop: no tap outside it.
  return (rules_lib.rule_for(layer) is None and not hasattr(layer, "cell")
          and not owns_trainable_variables(layer, trainable))


def _trainable_ids(model: Any) -> Set[int]:
  return {id(v) for v in model.trainable_variables}


def trainable_units(model: Any) -> List[Any]:
  """The layers tapped by the fast path: every layer that holds trainable
  variables, reached through models and through layers whose trainable
  variables all belong to sublayers (``_tapped_through_sublayers``).
  """
  trainable = _trainable_ids(model)
  units = []
  visited = set()

  def visit(layer: Any) -> None:
    # A layer reached twice (a task model's head calling its backbone's
    # token embedding in reverse) is one unit.
    if id(layer) in visited or not trainable_of(layer, trainable):
      return
    visited.add(id(layer))
    if _tapped_through_sublayers(layer, trainable):
      for sub in _sublayers(layer):
        visit(sub)
    else:
      units.append(layer)

  for layer in _sublayers(model):
    visit(layer)
  return units


def fast_path_unavailable_reason(model: Any, query: Any) -> Optional[str]:
  """None if the fast path applies to (model, query), else why not."""
  if not getattr(query, "supports_record_scales", lambda: False)():
    return f"the query {type(query).__name__} does not provide record_scales"
  trainable = _trainable_ids(model)
  seen: Dict[int, str] = {}
  for unit in trainable_units(model):
    for v in trainable_of(unit, trainable):
      key = id(v)
      if key in seen:
        return (f"variable {v.name} is shared by layers {seen[key]!r} and "
                f"{unit.name!r}")
      seen[key] = unit.name
  if set(seen) != trainable:
    return "some trainable variables are not owned by a layer"
  return None


def _covered_by_units(model: Any) -> Dict[int, Any]:
  """``{layer id: unit}`` for the layers inside each tapped unit (not the
  units themselves): their variables are the unit's rule's."""
  covered = {}

  def visit(layer: Any, unit: Any) -> None:
    for sub in _sublayers(layer):
      if id(sub) not in covered:
        covered[id(sub)] = unit
        visit(sub, unit)

  for unit in trainable_units(model):
    visit(unit, unit)
  return covered


def clipping_plan(model: Any) -> List[Tuple[str, str, str]]:
  """How the fast path computes each layer's per-record norms.

  Args:
    model: A built Keras model (Keras 3 or Keras 2).

  Returns:
    ``[(layer name, class name, path)]`` for every layer inside ``model``,
    where path is ``"fast rule (<Rule>)"``, ``"composite: its sublayers
    are tapped"``, ``"local vectorized_map (per-layer fallback)"`` (exact,
    slower; refused for Keras 3 EinsumDense-like layers on TF >= 2.16),
    ``"inside '<layer>': covered by its path"`` (a sublayer of a layer that
    has a rule or the fallback) or ``"no trainable variables"``. Training
    logs it at the first step.

  Example:
    >>> for name, cls, path in tf_dp.keras.clipping_plan(model):
    ...   print(f"{name:20} {cls:20} {path}")
  """
  plan = []
  trainable = _trainable_ids(model)
  covered = _covered_by_units(model)
  for layer in model_checks.all_layers(model):
    if is_model(layer):
      continue
    if not trainable_of(layer, trainable):
      path = "no trainable variables"
    elif id(layer) in covered:
      path = f"inside {covered[id(layer)].name!r}: covered by its path"
    elif _tapped_through_sublayers(layer, trainable):
      path = "composite: its sublayers are tapped"
    elif rules_lib.rule_for(layer) is not None:
      path = f"fast rule ({type(rules_lib.rule_for(layer)).__name__})"
    else:
      path = "local vectorized_map (per-layer fallback)"
    plan.append((layer.name, type(layer).__name__, path))
  return plan


VECTORIZED_EINSUM_ERROR = (
    "Layer {name!r} ({cls}) would run under tf.vectorized_map, where "
    "TensorFlow {version}'s oneDNN kernels corrupt memory for the einsum / "
    "matmul it builds (rank-4 x rank-2; tensorflow#117700, fixed upstream by "
    "#120199). Use per_example_method='auto' (the default) and an "
    "EinsumDense configuration the fast rule supports (no quantization; "
    "LoRA where the kernel's last axis is an output axis): tf_dp's fast "
    "path computes EinsumDense and MultiHeadAttention gradients without "
    "vectorized_map. A subclass that defines its own call, build or "
    "properties has no rule until you register one: "
    "tf_dp.keras.fast.register_rule(YourLayer, rule).")


def _einsum_classes() -> Tuple[Type[Any], ...]:
  """Keras 3's EinsumDense and MultiHeadAttention (tf-keras 2.21's train
  under vectorized_map with oneDNN on: measured, MHA model, 3 epochs): the
  imported adapters' ``pfor_hazard_layer_classes`` (a layer of a flavour
  not imported cannot exist)."""
  return tuple(cls for adapter in backend.imported()
               for cls in adapter.pfor_hazard_layer_classes())


def vectorized_map_hazard(layers: Iterable[Any]) -> Optional[str]:
  """An error message if any of ``layers`` must not run under
  ``tf.vectorized_map`` on this TensorFlow, else None.

  TF >= 2.16 with oneDNN (the default on x86) corrupts memory for the
  rank-4 x rank-2 matmul that Keras 3's EinsumDense builds under
  vectorized_map (the whole-model ``per_example_method="vectorized"``
  path, or the per-layer fallback for an EinsumDense the fast rule does
  not support). TF 2.15 is not affected.
  """
  version = tuple(int(v) for v in tf.__version__.split(".")[:2])
  if version < (2, 16):
    return None
  classes = _einsum_classes()
  for layer in layers:
    if isinstance(layer, classes):
      return VECTORIZED_EINSUM_ERROR.format(
          name=layer.name, cls=type(layer).__name__, version=tf.__version__)
  return None


def _float32(t: Any) -> Any:
  if tf.is_tensor(t) and t.dtype.is_floating and t.dtype != tf.float32:
    return tf.cast(t, tf.float32)
  return t


def _in_float32(tap: taps_lib.Tap) -> taps_lib.Tap:
  """``tap`` with its floating inputs and output in float32: rules compute
  per-record norms and sums in float32 whatever the layer's compute dtype
  (bfloat16 under ``mixed_bfloat16``, float64 under ``floatx="float64"``),
  so the scales of the query (float32) apply to them unchanged."""
  return taps_lib.Tap(tap.layer, tf.nest.map_structure(_float32, tap.args),
                      tap.kwargs, tf.nest.map_structure(_float32, tap.output))


def _records(tensor: tf.Tensor, num_microbatches: Optional[int]) -> tf.Tensor:
  batch = tf.shape(tensor)[0]
  if num_microbatches is None:
    return batch
  return tf.convert_to_tensor(num_microbatches, tf.int32)


def _check_taps_cover(units: Sequence[Any], rules: FoundRules,
                      variables: Sequence[Any], read_outside: Iterable[Any],
                      read_inside: Sequence[Sequence[Any]]) -> None:
  """Raises FastPathUnavailable unless every trainable variable's gradient
  comes from the taps: each rule accounts for exactly its layer's trainable
  variables, and none is read outside the call of the layer holding it
  (``read_outside``: outside every tapped call; ``read_inside``: per unit,
  inside its calls)."""
  # A tape watches the resource variable under a Keras 3 variable: both
  # share the handle.
  handle = lambda v: id(getattr(v, "handle", v))
  handles = {handle(v) for v in variables}
  trainable = {id(v) for v in variables}
  for v in read_outside:
    if handle(v) in handles:
      raise FastPathUnavailable(
          f"variable {v.name} is read outside the call of the layer that "
          "holds it (a layer reads a sublayer's weights directly)")
  for unit, reads in zip(units, read_inside):
    held = {handle(v) for v in trainable_of(unit, trainable)}
    for v in reads:
      if handle(v) in handles and handle(v) not in held:
        raise FastPathUnavailable(
            f"variable {v.name} is read inside the call of layer "
            f"{unit.name!r}, which does not hold it")
    rule = rules[id(unit)]
    if rule is None:
      continue
    if ({id(v) for v in rule.variables(unit)}
        != {id(v) for v in trainable_of(unit, trainable)}):
      raise FastPathUnavailable(
          f"the rule {type(rule).__name__} of layer {unit.name!r} does not "
          "account for exactly its trainable variables")


def _check_calls(unit: Any, rule: Optional[Rule], session: taps_lib.TapSession,
                 graph: Any) -> Rule:
  """Raises FastPathUnavailable unless the unit's calls can be handled
  (each recorded in ``graph``, the loss's, not inside a loop or a
  vectorized map of its parent); returns the unit's ``rule``, or the
  per-layer fallback for a unit without one."""
  for tap in session.all_taps.get(id(unit), []):
    for t in tf.nest.flatten(tap.output):
      if getattr(t, "graph", graph) is not graph:
        raise FastPathUnavailable(
            f"layer {unit.name!r} is called inside a loop or a vectorized "
            "map of the layer holding it")
  calls = session.call_counts.get(id(unit), 0)
  if calls != 1 and not (calls and rule is not None
                         and rule_types.takes_several_calls(rule)):
    raise FastPathUnavailable(f"layer {unit.name!r} was called {calls} "
                              "times in one forward pass")
  for tap in session.all_taps[id(unit)]:
    if any(tf.is_tensor(v) for v in tf.nest.flatten(tap.kwargs)):
      raise FastPathUnavailable(f"layer {unit.name!r} takes tensor keyword "
                                "arguments")
  if rule is None:
    hazard = vectorized_map_hazard([unit])
    if hazard:
      raise UnsupportedModelError(hazard)
    return rules_lib.LocalVectorizedRule(session.original_call(unit)[0])
  return rule


def _ready(grads: Any) -> List[tf.Tensor]:
  """The output gradients' tensors (control inputs: ``tf.Tensor`` only)."""
  return [t for t in tf.nest.flatten(grads) if isinstance(t, tf.Tensor)]


def _prepare(rule: Rule, unit: Any, taps: Sequence[taps_lib.Tap],
             outputs: Sequence[Any], grads: Sequence[Any],
             records: linear.Records) -> Any:
  """The rule's state from the unit's taps and their output gradients
  (zeros where an output does not reach the loss)."""
  grads = [tf.nest.map_structure(tf.zeros_like, out) if grad is None
           else grad for out, grad in zip(outputs, grads)]
  if rule_types.takes_float32_taps(rule):
    taps = [_in_float32(tap) for tap in taps]
    grads = [tf.nest.map_structure(_float32, grad) for grad in grads]
  if len(taps) == 1:
    return rule.prepare(unit, taps[0], grads[0], records)
  if not rule_types.takes_several_calls(rule):  # _check_calls refuses it.
    raise FastPathUnavailable(f"layer {unit.name!r} was called {len(taps)} "
                              "times in one forward pass")
  return rule.prepare_calls(unit, taps, grads, records)


class _TappedStep(NamedTuple):
  """``_proven_taps``'s result: per unit, its calls' taps, their output
  gradients, what the rules read of them, and the rule that reads them
  (its registered rule or the per-layer fallback)."""
  y_pred: Any
  losses: tf.Tensor
  unit_taps: List[List[taps_lib.Tap]]
  out_grads: List[List[Any]]
  read_grads: List[List[Any]]
  unit_rules: List[Rule]


def _proven_taps(model: Any, loss_fn: Callable[..., Any], x: Any, y: Any,
                 sample_weight: Any, units: Sequence[Any],
                 rules: FoundRules, pre_activation: Dict[int, bool],
                 records: linear.Records, record_reduction: str) -> _TappedStep:
  """One batched forward pass with the units tapped, the loss, and the
  backward pass to the taps, proven by the privacy gate
  (``tf_dp.keras.privacy_gate``) to keep examples apart.

  The loss's gradient with respect to the predictions is taken first, on
  its own tape: a loss that evaluates each example alone (tf_dp's, flagged
  ``each_example_alone``) gives per-example gradients by construction, and
  the gate then labels the model's backward pass from them.

  Returns a ``_TappedStep``.

  Raises:
    FastPathUnavailable: if the model's calls cannot be tapped, or the gate
      cannot prove that what the rules read holds rows by example.
    UnsupportedModelError: if the gate finds that the model combines
      examples, or writes data to a variable.
  """
  regions = privacy_gate.StepRegions(tf.compat.v1.get_default_graph())
  with taps_lib.TapSession(units, pre_activation) as session:
    with session.outside_reads() as outside:
      with tf.GradientTape() as tape:
        y_pred = model(x, training=True)
      regions.mark()
      predictions = tf.nest.flatten(y_pred)
      with tf.GradientTape() as loss_tape:
        loss_tape.watch(predictions)
        losses = loss_fn(y, y_pred, sample_weight)
        record_losses = per_example.record_loss(
            tf.reshape(losses, [records, -1]), record_reduction)
        total = tf.reduce_sum(record_losses)
      regions.mark()
  # A prediction the loss does not read has no gradient (as in Keras): the
  # variables feeding it alone have none either.
  connected = [(p, tf.convert_to_tensor(g)) for p, g in zip(
      predictions, loss_tape.gradient(total, predictions)) if g is not None]
  prediction_grads = [g for _, g in connected]
  regions.mark()
  _check_taps_cover(units, rules, model.trainable_variables,
                    outside.watched_variables(),
                    [session.reads.get(id(u), []) for u in units])
  unit_rules = [_check_calls(unit, rules[id(unit)], session,
                             getattr(total, "graph", None)) for unit in units]
  unit_taps = [session.all_taps[id(u)] for u in units]
  outputs = [[tap.output for tap in taps] for taps in unit_taps]
  if connected:
    out_grads = tape.gradient([p for p, _ in connected], outputs,
                              output_gradients=prediction_grads)
  else:
    out_grads = [[None] * len(taps) for taps in unit_taps]
  regions.mark()
  analysis = privacy_gate.analyse_fast_step(
      regions, privacy_gate.batch_sources(x, y, sample_weight),
      loss=(getattr(loss_fn, "each_example_alone", False), (y, y_pred,
                                                            sample_weight),
            losses, prediction_grads))
  try:
    moved = privacy_gate.prove_fast_step(model, analysis, unit_taps,
                                         out_grads, losses)
  except privacy_gate.NotProven as e:
    raise FastPathUnavailable(str(e)) from e
  for index, layout in moved.items():
    # Examples on another axis (a layer called on a time-major tensor): the
    # per-layer fallback reads each example's rows where they are.
    unit = units[index]
    if dp_batch_norm.is_dp_batch_norm(unit):
      # Its statistics are read per example from the first axis of its tap.
      raise FastPathUnavailable(
          f"DPBatchNormalization layer {unit.name!r} is called on a tensor "
          f"whose examples are not on its first axis")
    hazard = vectorized_map_hazard([unit])
    if hazard:
      raise FastPathUnavailable(hazard)
    unit_rules[index] = rules_lib.LocalVectorizedRule(
        session.original_call(unit)[0], layout=layout,
        without_activation=pre_activation[id(unit)])
  # What each rule reads of the output gradients: for a public output
  # broadcast to every example, the unsummed gradient.
  read_grads = [list(grads) for grads in out_grads]
  for index, layout in moved.items():
    read_grads[index][0] = tf.nest.pack_sequence_as(
        out_grads[index][0], [g if s is None else s[0] for g, s in zip(
            tf.nest.flatten(out_grads[index][0]), layout.summed)])
  return _TappedStep(y_pred, losses, unit_taps, out_grads, read_grads,
                     unit_rules)


class ClippedBatchSum(NamedTuple):
  """The fast path's result for one batch (``clipped_batch_sum``)."""
  # The query's preprocessed sum of the records' gradients.
  preprocessed_sum: Any
  y_pred: Any
  # Per-example losses ``[batch]``.
  losses: tf.Tensor
  # The number of records (a scalar int32 tensor).
  records: tf.Tensor


class TappedBatchSum(NamedTuple):
  """``tapped_clipped_batch_sum``'s result: the clipped sum, the last tap
  of each tapped unit by layer id, and the indices of the trainable
  variables without a gradient (``gradient_presence.without_gradient``:
  their sums are zeros; the step leaves them out of the update)."""
  clipped: ClippedBatchSum
  taps: Dict[int, taps_lib.Tap]
  without_gradient: FrozenSet[int]


def clipped_batch_sum(model: Any, loss_fn: Callable[..., Any], x: Any, y: Any,
                      sample_weight: Any, query: Any, params: Any,
                      num_microbatches: Optional[int] = None,
                      record_reduction: str = "mean",
                      record_weights: Optional[tf.Tensor] = None
                      ) -> ClippedBatchSum:
  """Sum over the batch's records of ``query.preprocess_record(grads)``.

  A record is one example, or ``batch / num_microbatches`` consecutive
  examples whose losses are averaged (``record_reduction="mean"``: a
  microbatch) or summed (``"sum"``: a user, whose gradient is the sum of
  the user's example gradients). Every rule treats a record's examples as
  positions of one record, so its norms are those of the record's whole
  gradient (cross terms between the record's examples included) and stay
  certified upper bounds.

  ``record_weights`` (optional ``[records]`` 0/1): records of weight 0
  (absent from a Poisson lot: its padding, whose gradient is zero) add
  nothing to the sum and are left out of whatever else the query counts
  per record (an adaptive clip's unclipped bits), as
  ``vectorized.clipped_sum`` leaves them out.

  Called eagerly, it traces itself first: what the step uses is what the
  privacy gate proves, a traced graph.

  Raises:
    FastPathUnavailable: at trace time, if a layer whose rule takes one
      call is called more than once, or with tensor keyword arguments, or
      if a rule's clipped sum leaves out a call that reads a variable
      (``gradient_presence.check_sums_follow_calls``).
  """
  if tf.executing_eagerly():
    traced = tf.function(
        lambda x, y, w: clipped_batch_sum(
            model, loss_fn, x, y, w, query, params, num_microbatches,
            record_reduction=record_reduction, record_weights=record_weights),
        autograph=False)
    return traced(x, y, sample_weight)
  return tapped_clipped_batch_sum(
      model, loss_fn, x, y, sample_weight, query, params, num_microbatches,
      record_reduction, record_weights).clipped


def tapped_clipped_batch_sum(model: Any, loss_fn: Callable[..., Any], x: Any,
                             y: Any, sample_weight: Any, query: Any,
                             params: Any,
                             num_microbatches: Optional[int] = None,
                             record_reduction: str = "mean",
                             record_weights: Optional[tf.Tensor] = None
                             ) -> TappedBatchSum:
  """``clipped_batch_sum`` inside a traced function, with the taps and the
  variables without a gradient (``TappedBatchSum``).

  Raises:
    ValueError: if called eagerly.
    FastPathUnavailable: as ``clipped_batch_sum``.
  """
  if tf.executing_eagerly():
    raise ValueError("tapped_clipped_batch_sum runs inside a traced "
                     "function only.")
  variables = model.trainable_variables
  units = trainable_units(model)
  rules: FoundRules = {id(u): rules_lib.rule_for(u) for u in units}
  pre_activation = {k: r is not None and r.pre_activation
                    for k, r in rules.items()}
  first = tf.nest.flatten(x)[0]
  records = _records(first, num_microbatches)
  y_pred, losses, unit_taps, out_grads, read_grads, unit_rules = _proven_taps(
      model, loss_fn, x, y, sample_weight, units, rules, pre_activation,
      records, record_reduction)
  absent = gradient_presence.without_gradient(variables, unit_taps, out_grads)
  index = {id(v): i for i, v in enumerate(variables)}
  sq_norms = [None] * len(variables)
  states = []
  ordered = lot_lib.ordered_for_memory(variables)
  # Without microbatches a record is one example: rules keep its static
  # sizes although the batch size may be unknown.
  with (linear.one_example_per_record(records)
        if num_microbatches is None else contextlib.nullcontext()):
    for unit, rule, taps, grads in zip(units, unit_rules, unit_taps,
                                       out_grads):
      outs = [tap.output for tap in taps]
      # On a large model (lot_lib.ORDERED_FOR_MEMORY_WEIGHTS) the rule's work
      # starts once the unit's output gradients exist: what it derives from
      # the forward taps alone (float64 casts, Gram matrices, normalised
      # inputs) would otherwise be computed during the forward pass and held
      # through the whole backward pass, for every layer at once.
      with tf.control_dependencies(_ready(grads) if ordered else []):
        state = _prepare(rule, unit, taps, outs, grads, records)
        unit_vars = rule.variables(unit)
        unit_sq = rule.sq_norms(state)
      for v, sq in zip(unit_vars, unit_sq):
        sq_norms[index[id(v)]] = sq
      states.append((rule, state, unit_vars))
    sq_norms = gradient_presence.zero_where_absent(sq_norms, absent)
    keep = tf.reduce_all(tf.stack([tf.math.is_finite(s) for s in sq_norms]), 0)
    safe_sq = [tf.where(keep, s, tf.zeros_like(s)) for s in sq_norms]
    scales, extra = query.record_scales(params, safe_sq)
    scales = [tf.where(keep, s, tf.zeros_like(s)) for s in scales]
    scaled_sum = [None] * len(variables)
    for rule, state, unit_vars in states:
      unit_scales = [scales[index[id(v)]] for v in unit_vars]
      for v, total_v in zip(unit_vars,
                            rule.clipped_sums(state, unit_scales, keep)):
        scaled_sum[index[id(v)]] = tf.cast(total_v, tf.as_dtype(v.dtype))
  gradient_presence.check_sums_follow_calls(
      units, variables, unit_taps, read_grads, scaled_sum, absent,
      scales + [keep])
  scaled_sum = gradient_presence.zero_where_absent(scaled_sum, absent)
  # A record of weight 0 has a zero gradient, so it adds nothing to the
  # scaled sums whatever its scale (leaving it out of ``keep`` would only
  # make every mask select, every step of a padded lot); it is left out of
  # what the query counts per record.
  counted = keep
  if record_weights is not None:
    counted = tf.logical_and(keep, tf.reshape(record_weights, [-1]) > 0)
  extra_sum = tf.nest.map_structure(
      lambda e: tf.reduce_sum(tf.where(counted, e, tf.zeros_like(e)), 0),
      extra)
  clipped = ClippedBatchSum(query.preprocessed_sum(scaled_sum, extra_sum),
                            y_pred, losses, records)
  last_taps = {id(unit): taps[-1] for unit, taps in zip(units, unit_taps)}
  return TappedBatchSum(clipped, last_taps, absent)
