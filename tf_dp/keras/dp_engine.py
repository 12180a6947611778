"""The DP-SGD step shared by every Keras flavour (Abadi et al. 2016, Alg. 1).

For each batch: per-record gradients, clipping by the ``DPQuery``
(``preprocess_record``), and accumulation of the clipped sum. When a lot of
``gradient_accumulation_steps`` batches is complete: noise is added once by
``get_noised_result`` (which records one ledger sample), the sum is divided
by the lot's number of records, the public regularisation gradient is added,
and the wrapped optimizer applies the result.

State (the query's global state, the lot's running sum, counters) lives in
``tf.Variable``s owned by this module, so it is checkpointed with the
optimizer and works inside ``model.fit`` graphs. The noise key is not part
of it: it lives in the process only (``tf_dp.dp_query.noise``).
"""

import warnings

from absl import logging
import tensorflow as tf

from tf_dp.core import config as config_lib
from tf_dp.dp_query import allocation
from tf_dp.dp_query.batch_norm_stats_query import BatchNormStats
from tf_dp.dp_query.batch_norm_stats_query import BatchNormStatsQuery
from tf_dp.dp_query.metrics_query import DPMetricsQuery
from tf_dp.dp_query.nested_query import NestedQuery
from tf_dp.keras import dp_batch_norm
from tf_dp.keras import model_checks
from tf_dp.keras import per_example
from tf_dp.keras.fast import clipped_sum as fast_clipping
from tf_dp.privacy_ledger import PrivacyLedger
from tf_dp.privacy_ledger import QueryWithLedger

# No limit on the number of lots (until a PrivacyBudget sets one).
UNLIMITED_LOTS = 2 ** 62


def _variables_like(structure, name):
  return tf.nest.map_structure(
      lambda t: tf.Variable(t, trainable=False, name=name), structure)


def _read(variables):
  return tf.nest.map_structure(lambda v: v.read_value(), variables)


def _assign(variables, values):
  return tf.group(tf.nest.flatten(tf.nest.map_structure(
      lambda v, x: v.assign(tf.cast(x, v.dtype)), variables, values)))


class _OpenLot:
  """The lot being accumulated (a plain object: not tracked, not saved)."""

  def __init__(self, state, records, examples, batches):
    self.state = state
    self.records = records
    self.examples = examples
    self.batches = batches


class DPEngine(tf.Module):
  """Clipping, accumulation, noise and ledger for one optimizer."""

  def __init__(self, config):
    super().__init__(name="tf_dp_engine")
    self.config = config
    # Without population_size (inferred later from fit's arrays) the ledger
    # starts with n = 1; no step runs before n is known (``step``).
    n = config.population_size or 1
    self.ledger = config.ledger or PrivacyLedger(
        n, config.sampling_probability or 1.0 / n,
        sampling=config.sampling,
        examples_per_record=1, max_samples=config.max_lots)
    self._query = None
    self._built = False
    # Lots that may be released in total (ledger samples); a PrivacyBudget
    # lowers it so that a step that would cross the budget never runs,
    # whatever steps_per_execution is.
    self.allowed_lots = tf.Variable(UNLIMITED_LOTS, dtype=tf.int64,
                                    trainable=False, name="allowed_lots")

  @property
  def query(self):
    return self._query

  def infer_population_size(self, examples):
    """Takes n from the ``examples`` that ``fit`` trains on (arrays of
    known length), unless ``population_size`` was given.

    The ledger records this n with every later sample. A given
    ``population_size`` larger than ``examples`` is kept, with a warning:
    it understates epsilon unless the training set was itself drawn at
    random from that population.
    """
    cfg = self.config
    if cfg.population_size is None or cfg.population_size_inferred:
      if cfg.population_size is None:
        logging.info("tf_dp: population_size inferred from fit's arrays: "
                     "n = %d training examples.", examples)
      cfg.population_size = int(examples)
      cfg.population_size_inferred = True
      self.apply_inferred_population_size()
    elif examples < cfg.population_size:
      warnings.warn(
          f"population_size={cfg.population_size} but fit trains on "
          f"{examples} examples: the ledger accounts sampling from "
          f"{cfg.population_size}, which understates epsilon unless these "
          f"{examples} were themselves drawn at random from the larger "
          f"population. Pass population_size={examples} (or leave it out "
          f"to infer it from fit's arrays).", UserWarning, stacklevel=3)

  def apply_inferred_population_size(self):
    """Sets the ledger's n to the n inferred from ``fit`` (after a loaded
    ledger overwrote it)."""
    cfg = self.config
    if not cfg.population_size_inferred:
      return
    if float(self.ledger.population_size.numpy()) != cfg.population_size:
      self.ledger.set_sample_size(population_size=cfg.population_size)

  @property
  def built(self):
    return self._built

  def build(self, var_list, model=None):
    """Creates the queries and their state variables for ``var_list``.

    The ledgered query is a ``NestedQuery`` with a ``"grads"`` part (the
    user's query, or one built from l2_norm_clip and noise_multiplier), a
    ``"metrics"`` part if private metrics are on, and a ``"bn/<layer>"`` part
    per ``DPBatchNormalization`` layer: one sample, several sum queries,
    noised once per lot and recorded as one ledger sample.
    """
    if self._built:
      return
    cfg = self.config
    templates = [tf.zeros(v.shape, v.dtype) for v in var_list]
    grad_query = cfg.dp_query
    if isinstance(grad_query, QueryWithLedger):
      self.ledger = grad_query.ledger
      grad_query = grad_query.query
    if grad_query is None:
      grad_query = allocation.build_query(templates, cfg.l2_norm_clip,
                                          cfg.noise_multiplier,
                                          clipping=cfg.clipping,
                                          noise=cfg.noise_allocation,
                                          secure_mode=cfg.secure_mode)
    self._grad_query = grad_query
    parts = {"grads": grad_query}
    part_templates = {"grads": templates}
    self._bn_layers = {}
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
        raise ValueError("Private metrics (metrics_noise_stddev) count "
                         "examples and cannot be combined with microbatches.")
      classes = int(model.output_shape[-1])
      parts["metrics"] = DPMetricsQuery(classes, cfg.metrics_noise_stddev,
                                        secure_mode=cfg.secure_mode)
      part_templates["metrics"] = None
    self._query = NestedQuery(parts)
    self.global_state = _variables_like(self._query.initial_global_state(),
                                        "dp_global_state")
    self._templates = part_templates
    # The open lot is an un-noised function of the data: it is kept out of
    # checkpoints and saved models (an untracked holder), so a restore starts
    # a fresh lot and nothing un-noised is ever written to disk.
    self._open_lot = _OpenLot(
        _variables_like(self._empty_lot(), "dp_lot_state"),
        tf.Variable(0.0, trainable=False, name="lot_records"),
        tf.Variable(0.0, trainable=False, name="lot_examples"),
        tf.Variable(0, trainable=False, name="batches_in_lot"))
    self.dp_metrics = {name: tf.Variable(float("nan"), trainable=False,
                                         name=f"dp_{name}")
                       for name in ("accuracy", "count")
                       if "metrics" in parts}
    self._built = True

  @property
  def lot_state(self):
    return self._open_lot.state

  @property
  def lot_records(self):
    return self._open_lot.records

  @property
  def lot_examples(self):
    return self._open_lot.examples

  @property
  def batches_in_lot(self):
    return self._open_lot.batches

  def _empty_lot(self):
    return self._query.initial_sample_state(self._templates)

  def clipped_batch_sum(self, model, loss_fn, x, y, sample_weight):
    """The batch's sum of preprocessed records (this replica's), per part.

    Returns ``(y_pred, per_example_losses, batch_sum, records, examples)``.
    """
    cfg = self.config
    params = self._query.derive_sample_params(_read(self.global_state))
    grad_params = params["grads"]
    fast = self._fast_clipped_sum(model, loss_fn, x, y, sample_weight,
                                  grad_params)
    taps = None
    if fast is not None:
      grads_sum, y_pred, losses, records, taps = fast
    else:
      if self._bn_layers:
        raise ValueError(
            "DPBatchNormalization needs the fast clipping path, which is "
            "unavailable for this model (see the log for why).")
      # Ragged or sparse inputs run a tf.map_fn loop: no pfor hazard.
      hazard = None if per_example.composite_inputs_reason(x) else (
          fast_clipping.vectorized_map_hazard(model_checks.all_layers(model)))
      if hazard is not None:
        raise ValueError(hazard)
      grads, y_pred, losses = per_example.record_gradients(
          model, loss_fn, x, y, sample_weight,
          self.microbatches_per_replica())
      clipped = tf.vectorized_map(
          lambda g: self._grad_query.preprocess_record(grad_params, g), grads,
          fallback_to_while_loop=True)
      grads_sum = tf.nest.map_structure(lambda t: tf.reduce_sum(t, axis=0),
                                        clipped)
      records = tf.shape(tf.nest.flatten(grads)[0])[0]
    records = tf.cast(records, tf.float32)
    examples = tf.cast(tf.shape(losses)[0], tf.float32)
    present = None
    if sample_weight is not None and cfg.sampling == "poisson":
      present = tf.cast(tf.cast(sample_weight, tf.float32) > 0, tf.float32)
      examples = tf.reduce_sum(present)
    batch_sum = {"grads": grads_sum}
    for key, layer in self._bn_layers.items():
      batch_sum[key] = self._bn_sum(key, params[key], taps[id(layer)],
                                    present)
    if "metrics" in params:
      batch_sum["metrics"] = self._metrics_sum(params["metrics"], y, y_pred,
                                               present)
    return y_pred, losses, batch_sum, records, examples

  def _masked_sum(self, records, present):
    if present is None:
      return tf.nest.map_structure(lambda t: tf.reduce_sum(t, 0), records)
    return tf.nest.map_structure(
        lambda t: tf.tensordot(present, t, axes=[[0], [0]]), records)

  def _bn_sum(self, key, params, tap, present):
    """Clipped per-example (mean, mean of squares) of a DP BN layer's input."""
    query = self._query.queries[key]
    x = tf.cast(tf.convert_to_tensor(tap.args[0]), tf.float32)
    axes = list(range(1, x.shape.rank - 1))
    stats = BatchNormStats(tf.reduce_mean(x, axes) if axes else x,
                           tf.reduce_mean(tf.square(x), axes) if axes
                           else tf.square(x))
    clipped = tf.vectorized_map(lambda r: query.preprocess_record(params, r),
                                stats)
    return self._masked_sum(clipped, present)

  def _metrics_sum(self, params, y, y_pred, present):
    """Clipped per-example (count, correct, one-hot class) records."""
    query = self._query.queries["metrics"]
    y_pred = tf.convert_to_tensor(y_pred)
    labels = tf.convert_to_tensor(y)
    if labels.shape.rank == y_pred.shape.rank and y_pred.shape[-1] != 1:
      labels = tf.argmax(labels, axis=-1)
    labels = tf.reshape(tf.cast(labels, tf.int32), [-1])
    records = tf.vectorized_map(
        lambda a: query.preprocess_record(params, (a[0], a[1])),
        (labels, y_pred))
    return self._masked_sum(records, present)

  def microbatches_per_replica(self):
    """Microbatches of this replica's batch, or None (per-example records).

    ``num_microbatches`` counts microbatches of the global batch: under a
    strategy with R replicas each replica splits its part into
    ``num_microbatches / R`` records.

    Raises:
      ValueError: if ``num_microbatches`` is not a multiple of R.
    """
    total = self.config.num_microbatches
    if total is None:
      return None
    replicas = tf.distribute.get_strategy().num_replicas_in_sync
    if total % replicas:
      raise ValueError(
          f"num_microbatches={total} counts microbatches of the global batch "
          f"and must be a multiple of the {replicas} replicas of the "
          f"tf.distribute strategy (each replica splits its part of the "
          f"batch into num_microbatches / replicas records). Use a multiple "
          f"of {replicas}.")
    return total // replicas

  def _fast_clipped_sum(self, model, loss_fn, x, y, sample_weight, params):
    """The fast path's result, or None (after logging why) to fall back."""
    method = self.config.per_example_method
    if method == "vectorized":
      return None
    reason = (per_example.composite_inputs_reason(x) or
              fast_clipping.fast_path_unavailable_reason(model,
                                                         self._grad_query))
    if reason is None:
      microbatches = self.microbatches_per_replica()
      if microbatches is not None:
        per_example.split_into_records(tf.nest.flatten(x)[0], microbatches)
      try:
        result = fast_clipping.clipped_batch_sum(
            model, loss_fn, x, y, sample_weight, self._grad_query, params,
            microbatches, return_taps=True)
        logging.log_first_n(
            logging.INFO, "tf_dp fast clipping plan: %s", 1,
            fast_clipping.clipping_plan(model))
        return result
      except fast_clipping.FastPathUnavailable as e:
        reason = str(e)
    if method == "fast":
      raise ValueError(f"per_example_method='fast' is unavailable: {reason}.")
    logging.log_first_n(
        logging.WARNING, "tf_dp: per-example gradients with "
        "tf.vectorized_map (slower) because %s.", 1, reason)
    return None

  def finish_lot(self, lot, records, examples):
    """Noises the lot's sum once, records it, and returns the mean gradient.

    The ledger sample is what was drawn: a fixed-size lot records
    ``q = examples / n`` (n: the ledger's population size) and, with
    microbatches, ``examples / records`` examples per record; a Poisson lot
    records the sampler's q. The sum is divided by the lot's number of
    records (fixed-size) or by its expected number of examples ``q * n``
    (Poisson, a public constant).
    """
    cfg = self.config
    n = tf.cast(self.ledger.population_size, tf.float32)
    if cfg.sampling == "poisson":
      denominator = tf.constant(cfg.sampling_probability, tf.float32) * n
      drawn = {}  # The sampler's q; the size drawn is private.
    else:
      denominator = records
      drawn = dict(sample_size=examples, examples_per_record=(
          examples / records if cfg.num_microbatches is not None else None))
    result, new_global, event = self._query.get_noised_result(
        lot, _read(self.global_state))
    written = self.ledger.record_sample(event, **drawn)
    updates = [written, _assign(self.global_state, new_global)]
    for key, layer in self._bn_layers.items():
      stats = BatchNormStatsQuery.statistics(result[key], denominator)
      updates.append(layer.update_statistics(stats["mean"],
                                             stats["variance"]))
    if "metrics" in result:
      noisy = result["metrics"]
      updates.append(self.dp_metrics["accuracy"].assign(noisy["accuracy"]))
      updates.append(self.dp_metrics["count"].assign(noisy["count"]))
    with tf.control_dependencies(updates):
      return [tf.identity(r) / tf.cast(denominator, r.dtype)
              for r in tf.nest.flatten(result["grads"])]

  def discard_lot(self):
    """Drops a partly accumulated lot without releasing anything (eager)."""
    if not self._built:
      return 0
    pending = int(self.batches_in_lot.numpy())
    if pending:
      _assign(self.lot_state, self._empty_lot())
      self.lot_records.assign(0.0)
      self.lot_examples.assign(0.0)
      self.batches_in_lot.assign(0)
    return pending

  def step(self, model, loss_fn, x, y, sample_weight, apply_fn):
    """One batch: clip, add to the lot, and on the lot's last batch noise
    once and apply.

    Under a ``tf.distribute`` strategy, each replica clips its own
    examples; one ``merge_call`` sums the replicas' clipped
    sums and runs the rest once, in cross-replica context: the noise is
    added once per global lot and the ledger gets one sample per lot.
    ``apply_fn(mean_gradients)`` applies the private mean gradient.
    Returns ``(y_pred, per_example_losses)``.
    """
    if self.config.population_size is None:
      raise ValueError("population_size is unknown. " +
                       config_lib.POPULATION_SIZE_REQUIRED)
    y_pred, losses, batch_sum, records, examples = self.clipped_batch_sum(
        model, loss_fn, x, y, sample_weight)
    context = tf.distribute.get_replica_context()
    if context is not None and tf.distribute.has_strategy():
      # Any strategy, even with one replica: its variables (the noise draw
      # counter, the ledger) may only be updated in cross-replica context.

      def merge(strategy, batch_sum, records, examples):
        total = lambda v: strategy.reduce(tf.distribute.ReduceOp.SUM, v,
                                          axis=None)
        # Optimizers apply in replica context (as Keras's own
        # LossScaleOptimizer does): every replica applies the same mean,
        # copied onto its device (an all-reduce needs placed values).
        on_replica = lambda mean: apply_fn([tf.identity(g) for g in mean])
        apply_in_replicas = lambda mean: strategy.extended.call_for_each_replica(
            on_replica, args=(mean,))
        return self._add_to_lot(tf.nest.map_structure(total, batch_sum),
                                total(records), total(examples),
                                apply_in_replicas)

      done = context.merge_call(merge, args=(batch_sum, records, examples))
    else:
      done = self._add_to_lot(batch_sum, records, examples, apply_fn)
    with tf.control_dependencies([done]):
      return tf.nest.map_structure(tf.identity, y_pred), tf.identity(losses)

  def _add_to_lot(self, batch_sum, records, examples, apply_fn):
    """Adds a (global) batch sum to the lot unless the budget is spent."""
    within_budget = tf.cast(self.ledger.sample_count,
                            tf.int64) < self.allowed_lots
    return tf.cond(
        within_budget,
        lambda: self._add_to_lot_within_budget(batch_sum, records, examples,
                                               apply_fn),
        tf.no_op)

  def _add_to_lot_within_budget(self, batch_sum, records, examples,
                                apply_fn):
    """Adds a (global) batch sum to the lot; finishes the lot when full."""
    k = self.config.gradient_accumulation_steps
    if k == 1:
      lot = self._query.accumulate_preprocessed_record(self._empty_lot(),
                                                       batch_sum)
      apply_fn(self.finish_lot(lot, records, examples))
      return tf.no_op()
    lot = self._query.accumulate_preprocessed_record(_read(self.lot_state),
                                                     batch_sum)
    records = self.lot_records + records
    examples = self.lot_examples + examples

    def finish():
      apply_fn(self.finish_lot(lot, records, examples))
      return tf.group(_assign(self.lot_state, self._empty_lot()),
                      self.lot_records.assign(0.0),
                      self.lot_examples.assign(0.0),
                      self.batches_in_lot.assign(0))

    def keep():
      return tf.group(_assign(self.lot_state, lot),
                      self.lot_records.assign(records),
                      self.lot_examples.assign(examples),
                      self.batches_in_lot.assign_add(1))

    return tf.cond(self.batches_in_lot >= k - 1, finish, keep)
