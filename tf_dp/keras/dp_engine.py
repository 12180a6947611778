"""The Keras part of the DP step: the query from the model's layers, and
each batch's clipped sum.

``DPEngine`` is the framework-neutral ``tf_dp.core.lot_engine.LotEngine``
(lots, noise once per lot, the ledger sample, the denominator, the budget,
the replica merge) given what only a Keras model knows:

* the query: a ``NestedQuery`` with a ``"grads"`` part, a ``"metrics"``
  part if private metrics are on, and a ``"bn/<layer>"`` part per
  ``DPBatchNormalization`` layer;
* each batch's records: examples, microbatches, or users
  (``privacy_unit="user"``: each user's ``max_examples_per_user``
  consecutive rows, whose gradient is the sum of the user's example
  gradients);
* each batch's clipped sum, per part: the gradients by the fast path
  (``tf_dp.keras.fast``: ghost norms and per-layer rules) or by per-example
  gradients and ``tf_dp.core.vectorized.clipped_sum``; the batch-norm
  statistics from the layers' taps; the metrics from the predictions;
* what a released lot's batch-norm and metrics parts update;
* ``population_size`` inferred from the arrays ``fit`` trains on.

Its tracked state (ledger, query global state, budget, DP metrics) is the
core engine's plus the metrics, so checkpoints keep their layout.
"""

from typing import (Any, Callable, Dict, FrozenSet, List, NamedTuple, Optional,
                    Sequence, Tuple, cast)
import warnings
import weakref

from absl import logging
import tensorflow as tf

from tf_dp.core import lot as lot_lib
from tf_dp.core import lot_engine
from tf_dp.core import vectorized
from tf_dp.dp_query.batch_norm_stats_query import BatchNormStats
from tf_dp.dp_query.batch_norm_stats_query import BatchNormStatsQuery
from tf_dp.dp_query.dp_query import DPQuery
from tf_dp.dp_query.dp_query import Nest
from tf_dp.dp_query.metrics_query import DPMetricsQuery
from tf_dp.errors import PrivacyError
from tf_dp.errors import SamplingMismatchError
from tf_dp.errors import UnsupportedModelError
from tf_dp.keras import dp_batch_norm
from tf_dp.keras import model_checks
from tf_dp.keras import per_example
from tf_dp.keras import privacy_gate
from tf_dp.keras.fast import clipped_sum as fast_clipping
from tf_dp.keras.fast import gradient_presence
from tf_dp.keras.fast import taps as taps_lib
from tf_dp.sampling import PrivacyUnit
from tf_dp.sampling import Sampling

GRADIENTS = lot_engine.GRADIENTS
METRICS = "metrics"


class _EagerStep:
  """A traced step for eager calls (``DPEngine._eager_step``)."""

  def __init__(self, model: Any, loss_fn: Callable[..., Any],
               variables: Tuple[int, ...]) -> None:
    self.model = model
    self.loss_fn = loss_fn
    self.variables = variables
    self.function: Any = None
    self.without_gradient: Any = frozenset()


# Kept outside the engine, a tf.Module whose attributes would be tracked
# (and exported); weak keys, so that an engine's steps go with it.
_EAGER_STEPS: "weakref.WeakKeyDictionary[Any, List[_EagerStep]]" = (
    weakref.WeakKeyDictionary())


class BatchSum(NamedTuple):
  """One replica's batch, clipped (``DPEngine.clipped_batch_sum``)."""
  y_pred: Any
  # Per-example losses ``[batch]``.
  losses: tf.Tensor
  # ``{part: sum of preprocessed records}``.
  batch_sum: Dict[str, Any]
  # Records and examples (float32); with ``privacy_unit="user"`` the
  # examples counted are the users present (records holding a row of
  # positive weight), the lot's units.
  records: tf.Tensor
  examples: tf.Tensor
  # Indices of the trainable variables whose gradient is None (their sums
  # are zeros).
  without_gradient: FrozenSet[int]


def require_eager_execution(constructor: str) -> None:
  """Refuses to build Keras DP training where TensorFlow 2 behaviour is off.

  Under ``tf.compat.v1.disable_v2_behavior()`` (or
  ``disable_eager_execution()``, or inside a ``tf.Graph``) Keras trains
  with its graph-mode loop, which never calls the ``train_step`` that
  ``make_private`` installs (Keras 2), or cannot train at all (Keras 3);
  and the ledger is read eagerly. Refused where the user builds the
  optimizer or model, not at the first step.

  Args:
    constructor: What the user called, named in the message.

  Raises:
    RuntimeError: when not executing eagerly outside ``tf.function``s,
      naming the fixes.
  """
  if tf.compat.v1.executing_eagerly_outside_functions():
    return
  raise RuntimeError(
      f"{constructor} needs TensorFlow 2 behaviour (eager execution), which "
      f"is off here: tf.compat.v1.disable_v2_behavior() or "
      f"disable_eager_execution() was called in this process (TF Privacy's "
      f"classification notebook does), or this code runs inside a graph "
      f"(tf.Graph().as_default(), an Estimator model_fn). tf_dp trains a "
      f"Keras model with its own train step (tf_dp.keras.make_private), "
      f"which Keras's graph-mode training loop never calls, and keeps the "
      f"privacy ledger in variables it reads eagerly. Fix: remove "
      f"tf.compat.v1.disable_v2_behavior() (model.fit still runs the DP "
      f"step as a compiled graph, a tf.function); in graph-mode code (an "
      f"Estimator, a tf.compat.v1.Session) use the compat.v1 optimizers "
      f"instead: tf_dp.estimator.DPGradientDescentOptimizer, or TF "
      f"Privacy's DPGradientDescentGaussianOptimizer from tf_dp.compat."
      f"tensorflow_privacy.privacy.optimizers.dp_optimizer.")


class DPEngine(lot_engine.LotEngine):
  """The lot engine of one Keras ``DPOptimizer``: clipping by the fast or
  the vectorized path, DP batch-norm statistics and metrics.

  Privacy contract: as ``LotEngine``; each record's gradient is clipped by
  the gradient query (``preprocess_record``, or its ``record_scales`` on
  the fast path: the same clipped sum), each example's batch-norm
  statistics and metrics record by their own queries, all noised once per
  lot in one ledger sample. Built only with TensorFlow 2 behaviour on
  (``require_eager_execution``).
  """

  def __init__(self, config: Any, name: str = "tf_dp_engine") -> None:
    require_eager_execution(config.caller.constructor)
    super().__init__(config, name=name)

  def infer_population_size(self, examples: int) -> bool:
    """Takes n from the ``examples`` that a ``fit`` trains on (arrays of
    known length), unless ``population_size`` was given.

    Privacy contract: the inferred n belongs to the ``fit`` that inferred
    it: the ledger records it with that fit's samples, and
    ``forget_inferred_population_size`` (called when that fit returns or
    raises) removes it, so that a later ``fit`` on a pipeline,
    ``train_on_batch`` or ``private_step`` (whose n nobody knows) is refused
    before any update instead of recording its lots with another data set's
    n. A given ``population_size`` larger than ``examples`` is kept, with a
    warning: it understates epsilon unless the training set was itself
    drawn at random from that population. A given one smaller than
    ``examples`` (of examples, not users) is refused: the lots would be
    recorded as drawn from a population they do not fit in (except with a
    ``noise_strategy``, whose accounting does not use n).

    Returns:
      Whether n was inferred (the caller must then forget it).

    Raises:
      SamplingMismatchError: if a given per-example ``population_size`` is
        smaller than ``examples``.
    """
    cfg = self.config
    if cfg.population_size is None:
      logging.info(
          "tf_dp: population_size inferred from fit's arrays: n = %d "
          "training examples. The ledger accounts the shuffled batches "
          "Keras draws from them as fixed-size samples (replace-one "
          "neighbours), so its epsilon (tf_dp.analysis."
          "compute_epsilon_from_ledger) is larger than a Poisson-sampling "
          "epsilon such as TF Privacy's tutorials print.", examples)
      self.inferred_population_size = int(examples)
      self.apply_inferred_population_size()
      return True
    if (examples > cfg.population_size
        and cfg.privacy_unit is PrivacyUnit.EXAMPLE
        and cfg.noise_strategy is None):  # Correlated noise: n unused.
      raise SamplingMismatchError(
          f"population_size={cfg.population_size} but fit trains on "
          f"{examples} examples: population_size is the number of training "
          f"examples n, at least the number fit trains on, and a smaller "
          f"one records every lot with a q (batch / n) of another data set. "
          f"Pass {cfg.caller.setting('population_size', 'len(x_train)')}, "
          f"here {examples} less any validation_split part, or leave it out "
          f"to infer it from fit's arrays.")
    if examples < cfg.population_size:
      warnings.warn(
          f"population_size={cfg.population_size} but fit trains on "
          f"{examples} examples: the ledger accounts sampling from "
          f"{cfg.population_size}, which understates epsilon unless these "
          f"{examples} were themselves drawn at random from the larger "
          f"population. Pass population_size={examples} (or leave it out "
          f"to infer it from fit's arrays).", UserWarning, stacklevel=3)
    return False

  def forget_inferred_population_size(self) -> None:
    """Ends the life of an n inferred by ``infer_population_size``: n is
    unknown again until the next ``fit`` on arrays (the ledger keeps the
    samples recorded with it)."""
    self.inferred_population_size = None

  def apply_inferred_population_size(self) -> None:
    """Sets the ledger's n to the n inferred from ``fit`` (after a loaded
    ledger overwrote it)."""
    n = self.inferred_population_size
    if n is None:
      return
    if float(self.ledger.population_size.numpy()) != n:
      self.ledger.set_sample_size(population_size=n)

  @property
  def noises_gradients_only(self) -> Optional[bool]:
    """Whether each lot's noised release is the gradient sum alone (no DP
    batch-norm statistics, no private metrics); None before the engine is
    built, when the model's DP batch-norm layers are not yet known."""
    if not self.built:
      return None
    return not self._bn_layers and self.config.metrics_noise_stddev is None

  def build(self, var_list: Sequence[Any], model: Any = None) -> None:
    """Creates the queries and their state variables for ``var_list``.

    The ledgered query is a ``NestedQuery`` with a ``"grads"`` part (the
    user's query, or one built from l2_norm_clip and noise_multiplier), a
    ``"metrics"`` part if private metrics are on, and a ``"bn/<layer>"`` part
    per ``DPBatchNormalization`` layer: one sample, several sum queries,
    noised once per lot and recorded as one ledger sample.
    """
    if self.built:
      return
    cfg = self.config
    templates = [tf.zeros(v.shape, v.dtype) for v in var_list]
    grad_query, own_ledger = lot_lib.gradient_query(cfg, templates)
    if own_ledger is not None:
      self.ledger = own_ledger
    parts: Dict[str, DPQuery] = {GRADIENTS: grad_query}
    part_templates: Dict[str, Any] = {GRADIENTS: templates}
    self._bn_layers: Dict[str, Any] = {}
    for layer in (model_checks.all_layers(model) if model is not None else []):
      if dp_batch_norm.is_dp_batch_norm(layer):
        key = f"bn/{layer.name}"
        self._bn_layers[key] = layer
        parts[key] = BatchNormStatsQuery(
            layer.l2_norm_clip, layer.noise_multiplier * layer.l2_norm_clip,
            expected_num_records=1.0, secure_mode=cfg.secure_mode).sum_query
        n = int(layer.moving_mean.shape[0])
        part_templates[key] = BatchNormStats(tf.zeros([n]), tf.zeros([n]))
    if cfg.metrics_noise_stddev is not None:
      if cfg.num_microbatches is not None:
        raise PrivacyError(
            "Private metrics (metrics_noise_stddev) count examples and "
            "cannot be combined with microbatches.")
      classes = int(model.output_shape[-1])
      if classes < 2:
        raise ValueError(
            f"Private metrics (metrics_noise_stddev) count the argmax of a "
            f"model's class scores, and this model has {classes} output "
            f"unit: its argmax is always class 0. Give the model one output "
            f"per class (e.g. 2 for a binary task), or leave "
            f"metrics_noise_stddev unset.")
      parts[METRICS] = DPMetricsQuery(classes, cfg.metrics_noise_stddev,
                                      secure_mode=cfg.secure_mode)
      part_templates[METRICS] = None
    if self._bn_layers and cfg.privacy_unit is PrivacyUnit.USER:
      raise UnsupportedModelError(
          "DPBatchNormalization clips each example's statistics, not each "
          "user's: it cannot be combined with privacy_unit='user'. Use "
          "GroupNormalization or LayerNormalization "
          "(tf_dp.keras.with_group_normalization(model)).")
    self.build_query(parts, part_templates)
    self.dp_metrics = {name: tf.Variable(float("nan"), trainable=False,
                                         name=f"dp_{name}")
                       for name in ("accuracy", "count")
                       if METRICS in parts}

  def step(self, model: Any, loss_fn: Callable[..., Any], x: Any, y: Any,
           sample_weight: Any,
           apply_fn: Callable[[List[Optional[tf.Tensor]]], Any]
           ) -> Tuple[Any, tf.Tensor]:
    """One batch: clip, add to the lot, and on the lot's last batch noise
    once and apply (``LotEngine.add_batch``).

    ``apply_fn(mean_gradients)`` applies the private mean gradient, None
    for a variable without a gradient (the loss does not depend on it:
    Keras leaves it out of the update, and so does the step; its noised
    zeros are discarded).
    Returns ``(y_pred, per_example_losses)``.
    """
    self.require_population_size()
    (y_pred, losses, batch_sum, records, examples,
     without_gradient) = self.clipped_batch_sum(model, loss_fn, x, y,
                                                sample_weight)
    if without_gradient:
      apply_present = apply_fn
      apply_fn = lambda mean: apply_present([
          None if i in without_gradient else g for i, g in enumerate(mean)])
    done = self.add_batch(batch_sum, records, examples, apply_fn)
    with tf.control_dependencies([done]):
      return tf.nest.map_structure(tf.identity, y_pred), tf.identity(losses)

  def records_per_replica(self, x: Any) -> Tuple[Any, str]:
    """``(records, reduction)`` of this replica's batch ``x``: the number
    of records (None: one per example) and how a record's loss combines
    its examples' (``"mean"``, or ``"sum"`` for users)."""
    cfg = self.config
    if cfg.privacy_unit is PrivacyUnit.USER:
      # DPConfig requires max_examples_per_user with user records.
      return (per_example.user_records(
          tf.nest.flatten(x)[0], cast(int, cfg.max_examples_per_user)), "sum")
    return self.microbatches_per_replica(), "mean"

  def clipped_batch_sum(self, model: Any, loss_fn: Callable[..., Any], x: Any,
                        y: Any, sample_weight: Any) -> BatchSum:
    """The batch's sum of preprocessed records (this replica's), per part.

    Privacy contract: computed by a traced graph that the privacy gate
    (``tf_dp.keras.privacy_gate``) checked while tracing it; called
    eagerly, it traces itself first (a step of eager code could do what
    no trace shows).

    Returns a ``BatchSum``.
    """
    if tf.executing_eagerly():
      step = self._eager_step(model, loss_fn)
      y_pred, losses, batch_sum, records, examples = step.function(
          x, y, sample_weight)
      return BatchSum(y_pred, losses, batch_sum, records, examples,
                      step.without_gradient)
    return self._traced_batch_sum(model, loss_fn, x, y, sample_weight)

  def _eager_step(self, model: Any,
                  loss_fn: Callable[..., Any]) -> "_EagerStep":
    """The traced step that eager calls run, one per model, loss function
    and set of trainable variables (an unfrozen layer makes a new one, so
    the gate runs on what will be computed); it retraces, and the gate
    runs again, for every new input signature."""
    variables = tuple(gradient_presence.variable_key(v)
                      for v in model.trainable_variables)
    steps = _EAGER_STEPS.setdefault(self, [])
    for step in steps:
      if (step.model is model and step.loss_fn is loss_fn
          and step.variables == variables):
        return step
    step = _EagerStep(model, loss_fn, variables)

    def traced(x: Any, y: Any, w: Any) -> List[Any]:
      # The variables without a gradient are known when tracing (a Python
      # set): kept aside, the function returns tensors only.
      *tensors, step.without_gradient = self._traced_batch_sum(
          model, loss_fn, x, y, w)
      return tensors

    step.function = tf.function(traced, autograph=False)
    steps[:] = steps[-3:] + [step]  # A few models per optimizer at most.
    return step

  def _traced_batch_sum(self, model: Any, loss_fn: Callable[..., Any], x: Any,
                        y: Any, sample_weight: Any) -> BatchSum:
    """``clipped_batch_sum`` inside a traced function."""
    cfg = self.config
    params = self.sample_params()
    grad_params = params[GRADIENTS]
    num_records, reduction = self.records_per_replica(x)
    if cfg.num_microbatches is not None:
      x, y, sample_weight = per_example.divided_into_microbatches(
          (x, y, sample_weight), num_records)
    # A Poisson lot's padding rows (weight 0) are no records of the lot:
    # every part leaves them out (an adaptive clip would count a padding
    # record's zero gradient as unclipped). An example is present if any
    # of its weights (one per time step, say) is positive.
    present = record_present = None
    if sample_weight is not None and cfg.sampling is Sampling.POISSON:
      positive = tf.cast(tf.convert_to_tensor(sample_weight) > 0, tf.float32)
      present = tf.reduce_max(
          tf.reshape(positive, tf.stack([tf.shape(positive)[0], -1])), 1)
      record_present = present
      if num_records is not None:
        record_present = tf.reduce_max(tf.reshape(
            present, tf.stack([tf.cast(num_records, tf.int32), -1])), 1)
    fast, gated = self._fast_clipped_sum(model, loss_fn, x, y,
                                         sample_weight, grad_params,
                                         num_records, reduction,
                                         record_present)
    taps: Dict[int, taps_lib.Tap] = {}
    if fast is not None:
      (grads_sum, y_pred, losses, records), taps, without_gradient = fast
    else:
      if not gated:
        privacy_gate.check_exact_step(model, loss_fn, x, y, sample_weight)
      if self._bn_layers:
        raise UnsupportedModelError(
            "DPBatchNormalization needs the fast clipping path, which is "
            "unavailable for this model (see the log for why).")
      # Ragged or sparse inputs run a tf.map_fn loop: no pfor hazard.
      hazard = None if per_example.composite_inputs_reason(x) else (
          fast_clipping.vectorized_map_hazard(model_checks.all_layers(model)))
      if hazard is not None:
        raise UnsupportedModelError(hazard)
      grads, y_pred, losses, without_gradient = per_example.record_gradients(
          model, loss_fn, x, y, sample_weight, num_records, reduction)
      grads_sum = vectorized.clipped_sum(self.gradient_query, grad_params,
                                         grads, weights=record_present)
      records = tf.shape(tf.nest.flatten(grads)[0])[0]
    records = tf.cast(records, tf.float32)
    examples = tf.cast(tf.shape(losses)[0], tf.float32)
    if present is not None:
      examples = tf.reduce_sum(present)
    if cfg.privacy_unit is PrivacyUnit.USER:
      examples = records
      if present is not None:
        examples = tf.reduce_sum(record_present)
    batch_sum = {GRADIENTS: grads_sum}
    for key, layer in self._bn_layers.items():
      if id(layer) not in taps:
        raise UnsupportedModelError(
            f"DPBatchNormalization layer {layer.name!r} has no tap of its "
            f"input: it is frozen (trainable=False) or not called by the "
            f"model. Its statistics are updated from the taps of its "
            f"trainable variables: keep it trainable (its statistics then "
            f"move with every lot, at a cost the ledger records), or "
            f"replace a frozen one by a layer applying its fixed "
            f"statistics.")
      batch_sum[key] = self._bn_sum(key, params[key], taps[id(layer)],
                                    present)
    if METRICS in params:
      batch_sum[METRICS] = self._metrics_sum(params[METRICS], y, y_pred,
                                             present)
    return BatchSum(y_pred, losses, batch_sum, records, examples,
                    without_gradient)

  def _bn_sum(self, key: str, params: Any, tap: taps_lib.Tap,
              present: Optional[tf.Tensor]) -> Any:
    """Clipped per-example (mean, mean of squares) of a DP BN layer's input."""
    x = tf.cast(tf.convert_to_tensor(tap.args[0]), tf.float32)
    axes = list(range(1, x.shape.rank - 1))
    stats = BatchNormStats(tf.reduce_mean(x, axes) if axes else x,
                           tf.reduce_mean(tf.square(x), axes) if axes
                           else tf.square(x))
    return vectorized.clipped_sum(self.part_query(key), params, stats,
                                  weights=present)

  def _metrics_sum(self, params: Any, y: Any, y_pred: Any,
                   present: Optional[tf.Tensor]) -> Any:
    """Clipped per-example (count, correct, one-hot class) records."""
    y_pred = tf.convert_to_tensor(y_pred)
    labels = tf.convert_to_tensor(y)
    # One-hot labels have the scores' rank and more than one column; a
    # column of integer labels ([batch, 1]) is read as it is.
    if labels.shape.rank == y_pred.shape.rank and labels.shape[-1] != 1:
      labels = tf.argmax(labels, axis=-1)
    labels = tf.reshape(tf.cast(labels, tf.int32), [-1])
    return vectorized.clipped_sum(self.part_query(METRICS), params,
                                  (labels, y_pred), weights=present)

  def _fast_clipped_sum(
      self, model: Any, loss_fn: Callable[..., Any], x: Any, y: Any,
      sample_weight: Any, params: Any, num_records: Any, reduction: str,
      record_present: Optional[tf.Tensor]
  ) -> Tuple[Optional[fast_clipping.TappedBatchSum], bool]:
    """``(result, gated)``: the fast path's result, or None (after logging
    why) to fall back; records whose ``record_present`` is 0 are left out
    of the sum. ``gated``: the privacy gate analysed the batched step (its
    refusals apply to the exact path too)."""
    method = self.config.per_example_method
    if method == "vectorized":
      return None, False
    reason = (per_example.composite_inputs_reason(x) or
              fast_clipping.fast_path_unavailable_reason(
                  model, self.gradient_query))
    gated = False
    if reason is None:
      if num_records is not None and reduction == "mean":
        per_example.split_into_records(tf.nest.flatten(x)[0], num_records)
      try:
        result = fast_clipping.tapped_clipped_batch_sum(
            model, loss_fn, x, y, sample_weight, self.gradient_query, params,
            num_records, record_reduction=reduction,
            record_weights=record_present)
        logging.log_first_n(
            logging.INFO, "tf_dp fast clipping plan: %s", 1,
            fast_clipping.clipping_plan(model))
        return result, True
      except fast_clipping.FastPathUnavailable as e:
        reason = str(e)
        gated = isinstance(e.__cause__, privacy_gate.NotProven)
    if method == "fast":
      raise UnsupportedModelError(
          f"per_example_method='fast' is unavailable: {reason}.")
    logging.log_first_n(
        logging.WARNING, "tf_dp: per-example gradients with "
        "tf.vectorized_map (slower) because %s.", 1, reason)
    return None, gated

  def use_released_parts(self, result: Nest,
                         examples_denominator: tf.Tensor) -> List[Any]:
    """Moves each DP batch-norm layer's statistics towards its noised
    estimate (the noised sums of the examples' statistics over
    ``examples_denominator``), and stores the noised metrics of the lot."""
    updates = []
    for key, layer in self._bn_layers.items():
      stats = BatchNormStatsQuery.statistics(result[key],
                                             examples_denominator)
      updates.append(layer.update_statistics(stats["mean"],
                                             stats["variance"]))
    if METRICS in result:
      updates += [variable.assign(result[METRICS][name])
                  for name, variable in self.dp_metrics.items()]
    return updates
