"""The DP step's state between batches, for any front end (Abadi et al.
2016, Alg. 1).

A front end clips each record of a batch and sums the batch (per part of
the query: the gradients, and whatever else it noises with them); then
``LotEngine.add_batch`` does the rest:

* under a ``tf.distribute`` strategy, one ``merge_call`` adds up the
  replicas' clipped sums, so the rest runs once per global batch;
* the budget guard: nothing is added once the ledger holds
  ``allowed_lots`` samples (a ``PrivacyBudget`` lowers it);
* the batch joins the open lot; on the lot's last batch
  (``gradient_accumulation_steps``), the lot is released once
  (``tf_dp.core.lot.release``: noise once, one ledger sample, the
  denominator) and the front end's ``apply_fn`` applies the mean gradient.

State lives in ``tf.Variable``s, so the step runs eagerly, in a
``tf.function`` and in ``model.fit`` graphs: the query's global state, the
budget and the ledger are tracked (checkpointed with their owner); the open
lot is not. The noise key is no part of any of them: it lives in the
process only (``tf_dp.dp_query.noise``).
"""

from typing import Any, Callable, Dict, List, Optional

import tensorflow as tf

from tf_dp.core import config as config_lib
from tf_dp.core import lot as lot_lib
from tf_dp.dp_query import noise
from tf_dp.dp_query.dp_query import DPQuery
from tf_dp.dp_query.dp_query import Nest
from tf_dp.dp_query.nested_query import NestedQuery
from tf_dp.errors import PrivacyError
from tf_dp.privacy_ledger import QueryWithLedger
from tf_dp.sampling import Sampling

# No limit on the number of lots (until a PrivacyBudget sets one).
UNLIMITED_LOTS = 2 ** 62

# The part of the query whose noised sum is the gradient.
GRADIENTS = "grads"


class _OpenLot:
  """The lot being accumulated (a plain object: not tracked, not saved)."""

  def __init__(self, state, records, examples, batches):
    self.state = state
    self.records = records
    self.examples = examples
    self.batches = batches


class _LotLimit:
  """The largest lot a ``PrivacyBudget`` planned for, and the lots refused
  for exceeding it (a plain object: not tracked, not saved)."""

  def __init__(self):
    self.max_examples = tf.Variable(float("inf"), trainable=False,
                                    name="max_lot_examples")
    self.oversized = tf.Variable(0, dtype=tf.int64, trainable=False,
                                 name="oversized_lots")


class LotEngine(tf.Module):
  """Lots, noise once per lot, the ledger and the budget for one optimizer.

  Privacy contract: the clipped sums given to ``add_batch`` are added to
  the open lot only while the ledger holds fewer than ``allowed_lots``
  samples; a full lot (``config.gradient_accumulation_steps`` batches, over
  every replica) is noised exactly once by the query and recorded as
  exactly one ledger sample (``tf_dp.core.lot.release``); its sum is
  divided by its number of records (fixed-size, shuffled) or by ``q * n``
  (Poisson). The open lot, an un-noised function of the data, is never
  tracked, so no checkpoint or saved model holds it.

  Args:
    config: A ``tf_dp.core.config.DPConfig``.
    name: The module's name.

  Example:
    >>> engine = LotEngine(config)
    >>> engine.build_query({GRADIENTS: query}, {GRADIENTS: templates})
    >>> params = engine.sample_params()[GRADIENTS]
    >>> engine.add_batch({GRADIENTS: clipped_sum}, records, examples,
    ...                  apply_fn=lambda mean: ...)
  """

  def __init__(self, config: config_lib.DPConfig,
               name: str = "tf_dp_engine") -> None:
    super().__init__(name=name)
    self.config = config
    # Without population_size (inferred later from fit's arrays) the ledger
    # starts with n = 1; no batch is added before n is known.
    self.ledger = config.ledger or lot_lib.new_ledger(config)
    # Set by build_query, before any use (``built``).
    self._query: NestedQuery = None  # type: ignore[assignment]
    self._built = False
    # Lots that may be released in total (ledger samples); a PrivacyBudget
    # lowers it so that a step that would cross the budget never runs,
    # whatever steps_per_execution is.
    self.allowed_lots = tf.Variable(UNLIMITED_LOTS, dtype=tf.int64,
                                    trainable=False, name="allowed_lots")
    # The examples a fixed-size or shuffled lot may hold: a PrivacyBudget
    # plans the lots left with lots of this size, so a larger one, whose q
    # the plan did not pay for, is never released (untracked, so that
    # checkpoints keep their layout).
    self._lot_limit = _LotLimit()
    # The most examples the front end expects a lot of its input to hold
    # (None if unknown), for a PrivacyBudget's plan.
    self.expected_lot_examples = None
    # n learned at run time when the configuration has none (a Keras fit's
    # arrays), for that run only: the configuration is never changed.
    self.inferred_population_size: Optional[int] = None

  def _trackable_children(self, save_type="checkpoint", **kwargs):
    """The tracked state: what any TF writer may put in a file.

    Privacy contract: every format built on TF's object graph (checkpoints
    of ``tf.train.Checkpoint`` or BackupAndRestore, Keras 2's TF-format
    ``save_weights``, SavedModels: the same walk, whatever the API or save
    type) writes the ledger, the budget and a query's public state, and
    never a secret: the open lot and the noise key are not tracked at all,
    and a correlated-noise query's global state (the last noises it added:
    two consecutive files would give away a clipped gradient sum) is left
    out here. A run restored from such a file therefore cannot continue its
    correlated noise (``check_noise_state_continues`` refuses it); its
    ledger is whole.
    """
    children = super()._trackable_children(save_type, **kwargs)
    if self.holds_correlated_noise:
      children = {name: child for name, child in children.items()
                  if name != "global_state"}
    return children

  @property
  def holds_correlated_noise(self) -> bool:
    """Whether the query's global state holds the last noises added
    (``noise_strategy``): state that never leaves the process."""
    return getattr(self.config, "noise_strategy", None) is not None

  def check_noise_state_continues(self) -> None:
    """Raises (eagerly) if a correlated-noise run's ledger counts other
    steps than its noise state: the state was not kept (a run restored
    from a file, which never holds it, or an older file restored over a
    later state), and noise drawn from it would not be the strategy's.

    Raises:
      PrivacyError: naming the ways on.
    """
    record = getattr(self.ledger, "correlated_noise", None)
    if not (self._built and self.holds_correlated_noise
            and record is not None):
      return
    steps = int(record.steps_run.numpy())
    state = self.global_state[GRADIENTS]
    if int(state.step.numpy()) == steps:
      return
    raise PrivacyError(
        f"This correlated-noise run's ledger records {steps} steps but its "
        f"noise state is at step {int(state.step.numpy())}: the state (the "
        f"last noises added) never leaves the process that drew them, so a "
        f"run restored from a checkpoint or saved file cannot continue its "
        f"correlated noise. Its ledger is whole: read its epsilon with "
        f"tf_dp.analysis.compute_epsilon_from_ledger(optimizer.ledger, "
        f"delta). To train further, compile a new tf_dp.DPOptimizer (a new "
        f"run from these weights) and add up the two runs' epsilons and "
        f"deltas.")

  @property
  def max_lot_examples(self) -> tf.Variable:
    """The most examples a released fixed-size or shuffled lot may hold
    (inf unless a ``PrivacyBudget`` planned with a lot size)."""
    return self._lot_limit.max_examples

  @property
  def oversized_lots(self) -> tf.Variable:
    """Lots not released because they held more than
    ``max_lot_examples``."""
    return self._lot_limit.oversized

  def lift_lot_limits(self) -> None:
    """No limit on the number or the size of lots (a new ``fit``: a
    ``PrivacyBudget`` sets its own)."""
    self.allowed_lots.assign(UNLIMITED_LOTS)
    self.max_lot_examples.assign(float("inf"))
    self.oversized_lots.assign(0)

  @property
  def query(self) -> Optional[NestedQuery]:
    """The ``NestedQuery`` of the parts (None until built)."""
    return self._query

  @property
  def built(self) -> bool:
    return self._built

  def build_query(self, parts: Dict[str, DPQuery], templates: Nest) -> None:
    """Creates the lots' query and its state variables, once.

    One sample, several sum queries (McMahan & Andrew 2018, Sec. 3): the
    query is a ``NestedQuery`` of ``parts``, noised once per lot and
    recorded as one ledger sample.

    Args:
      parts: ``{name: DPQuery}`` with a ``GRADIENTS`` part (the noised sum
        of the gradients) and any others noised with it.
      templates: ``{name: template}``: what each part's records look like
        (``initial_sample_state``'s argument; None where a part needs none).

    Raises:
      ValueError: without a ``GRADIENTS`` part.
    """
    if self._built:
      return
    if GRADIENTS not in parts:
      raise ValueError(f"The query needs a {GRADIENTS!r} part (the "
                       f"gradients); got parts {sorted(parts)}.")
    self._query = NestedQuery(parts)
    self.global_state = lot_lib.global_state_variables(self._query)
    # Kept as specs: template tensors (a model's size of zeros for the
    # gradients) would stay allocated for the optimizer's lifetime.
    self._templates = tf.nest.map_structure(
        lambda t: tf.TensorSpec.from_tensor(t) if isinstance(t, tf.Tensor)
        else t, templates)
    # The open lot is an un-noised function of the data: it is kept out of
    # checkpoints and saved models (an untracked holder), so a restore starts
    # a fresh lot and nothing un-noised is ever written to disk.
    # A lot of one batch is released by the step that clips it: no state
    # (a model's size of floats) is kept between steps.
    accumulates = self.config.gradient_accumulation_steps > 1
    self._open_lot = _OpenLot(
        lot_lib.variables_like(self._empty_lot(), "dp_lot_state")
        if accumulates else None,
        tf.Variable(0.0, trainable=False, name="lot_records"),
        tf.Variable(0.0, trainable=False, name="lot_examples"),
        tf.Variable(0, trainable=False, name="batches_in_lot"))
    noise.create_process_key()
    self._built = True

  def part_query(self, part: str) -> DPQuery:
    """The ``DPQuery`` of one part (e.g. ``GRADIENTS``)."""
    return self._query.queries[part]

  @property
  def gradient_query(self) -> DPQuery:
    """The query that clips and noises the gradients."""
    return self.part_query(GRADIENTS)

  def sample_params(self) -> Nest:
    """Every part's sample parameters, from the current global state."""
    return self._query.derive_sample_params(lot_lib.read(self.global_state))

  @property
  def lot_state(self) -> Optional[Nest]:
    """The open lot's variables; None with one batch per lot (released by
    the step that clips it: nothing is kept between steps)."""
    return self._open_lot.state

  @property
  def lot_records(self) -> tf.Variable:
    return self._open_lot.records

  @property
  def lot_examples(self) -> tf.Variable:
    return self._open_lot.examples

  @property
  def batches_in_lot(self) -> tf.Variable:
    return self._open_lot.batches

  def _empty_lot(self):
    return self._query.initial_sample_state(self._templates)

  def recorded_population_size(self) -> Optional[int]:
    """The n that the next ledger sample will record (eager).

    The ledger's current n: the one ``config.dp_query``'s
    ``QueryWithLedger`` brings when the engine is not built yet (building
    adopts that ledger), else the engine's ledger's.
    """
    ledger = self.ledger
    if not self._built and isinstance(self.config.dp_query, QueryWithLedger):
      ledger = self.config.dp_query.ledger
    return int(ledger.population_size.numpy())

  @property
  def population_size(self) -> Optional[int]:
    """n: the configuration's, else the one inferred for the running
    ``fit`` (``inferred_population_size``), else None (unknown)."""
    if self.config.population_size is not None:
      return self.config.population_size
    return self.inferred_population_size

  def require_population_size(self) -> None:
    """Raises unless n, which every ledger sample records, is known.

    Raises:
      PrivacyError: if ``population_size`` is still unknown (it was to be
        inferred from ``fit``'s arrays, and is not): no lot can be
        accounted without it.
    """
    if self.population_size is None:
      raise PrivacyError("population_size is unknown. " +
                         config_lib.population_size_required(
                             self.config.caller))

  def microbatches_per_replica(self) -> Optional[int]:
    """Microbatches of this replica's batch, or None (per-example records).

    ``num_microbatches`` counts microbatches of the global batch: under a
    strategy with R replicas each replica splits its part into
    ``num_microbatches / R`` records.

    Raises:
      PrivacyError: if ``num_microbatches`` is not a multiple of R.
    """
    total = self.config.num_microbatches
    if total is None:
      return None
    replicas = tf.distribute.get_strategy().num_replicas_in_sync
    if total % replicas:
      raise PrivacyError(
          f"num_microbatches={total} counts microbatches of the global batch "
          f"and must be a multiple of the {replicas} replicas of the "
          f"tf.distribute strategy (each replica splits its part of the "
          f"batch into num_microbatches / replicas records). Use a multiple "
          f"of {replicas}.")
    return total // replicas

  def add_batch(self, batch_sum: Nest, records: tf.Tensor, examples: tf.Tensor,
                apply_fn: Callable[..., Any]) -> Any:
    """Adds a batch's clipped sum to the lot; on the lot's last batch,
    releases the lot and applies its mean.

    Under a ``tf.distribute`` strategy (any, even with one replica: its
    variables, the ledger's included, may only be updated in cross-replica
    context), one batched all-reduce sums the replicas' clipped sums, and
    one ``merge_call`` runs the rest once: noise once per global lot, one
    ledger sample per lot.

    Args:
      batch_sum: ``{part: summed preprocessed records}`` of this replica's
        batch (``clipped_sum`` of each part's query).
      records: This replica's number of records (float32).
      examples: This replica's number of examples present (float32).
      apply_fn: ``apply_fn(mean_gradients)`` applies the lot's private mean
        gradient (a flat list); called in replica context.

    Returns:
      An op that is done when the batch is in the lot (and the lot released
      and applied if it was the last batch).
    """
    context = tf.distribute.get_replica_context()
    if context is None or not tf.distribute.has_strategy():
      return self._add_to_lot(batch_sum, records, examples, apply_fn)

    # One batched all-reduce of every sum (the collectives pack them), as
    # a plain step's gradient all-reduce: the same on every replica.
    summed = context.all_reduce(tf.distribute.ReduceOp.SUM,
                                (batch_sum, records, examples))

    def merge(strategy, summed):
      local = lambda v: strategy.experimental_local_results(v)[0]
      total_sum, total_records, total_examples = tf.nest.map_structure(
          local, summed)
      # Optimizers apply in replica context (as Keras's own
      # LossScaleOptimizer does): every replica applies the same mean,
      # copied onto its device (an all-reduce needs placed values).
      on_replica = lambda mean: apply_fn([tf.identity(g) for g in mean])
      apply_in_replicas = lambda mean: strategy.extended.call_for_each_replica(
          on_replica, args=(mean,))
      return self._add_to_lot(total_sum, total_records, total_examples,
                              apply_in_replicas)

    return context.merge_call(merge, args=(summed,))

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
      return self._release_unless_oversized(lot, records, examples, apply_fn)
    if self.lot_state is None:
      raise ValueError(
          f"gradient_accumulation_steps was set to {k} after the optimizer "
          "was built with 1: set it when creating the optimizer (DPConfig / "
          "DPOptimizer(gradient_accumulation_steps=...)).")
    lot = self._query.accumulate_preprocessed_record(
        lot_lib.read(self.lot_state), batch_sum)
    records = self.lot_records + records
    examples = self.lot_examples + examples

    def finish():
      released = self._release_unless_oversized(lot, records, examples,
                                                apply_fn)
      with tf.control_dependencies([released]):
        return tf.group(lot_lib.assign(self.lot_state, self._empty_lot()),
                        self.lot_records.assign(0.0),
                        self.lot_examples.assign(0.0),
                        self.batches_in_lot.assign(0))

    def keep():
      return tf.group(lot_lib.assign(self.lot_state, lot),
                      self.lot_records.assign(records),
                      self.lot_examples.assign(examples),
                      self.batches_in_lot.assign_add(1))

    return tf.cond(self.batches_in_lot >= k - 1, finish, keep)

  def _release_unless_oversized(self, lot, records, examples, apply_fn):
    """Releases a full lot and applies its mean, unless it is a fixed-size
    or shuffled lot of more than ``max_lot_examples`` examples: then
    nothing of it is released and ``oversized_lots`` counts it (a Poisson
    lot's q is the sampler's, whatever size was drawn)."""

    def release():
      apply_fn(self.finish_lot(lot, records, examples))
      return tf.no_op()

    if self.config.sampling is Sampling.POISSON:
      return release()
    return tf.cond(examples <= self.max_lot_examples, release,
                   lambda: tf.group(self.oversized_lots.assign_add(1)))

  def finish_lot(self, lot: Nest, records: tf.Tensor,
                 examples: tf.Tensor) -> List[tf.Tensor]:
    """Releases a full lot (``tf_dp.core.lot.release``) and returns its
    mean gradient (a flat list), read after the ledger sample and every
    state update."""
    result, denominator, updates = lot_lib.release(
        self._query, lot, self.global_state, self.ledger, self.config,
        records, examples)
    examples_denominator = denominator
    if self.config.num_microbatches is not None:
      # The other parts' records are examples, also when the gradients'
      # records are microbatches: their sums are divided by the examples.
      examples_denominator = lot_lib.denominator(self.config, self.ledger,
                                                 examples)
    updates += self.use_released_parts(result, examples_denominator)
    return lot_lib.mean(result[GRADIENTS], denominator, updates)

  def use_released_parts(self, result: Nest,
                         examples_denominator: tf.Tensor) -> List[Any]:
    """The ops that use a released lot's parts other than the gradients
    (``{part: noised sum}``), whose records are examples:
    ``examples_denominator`` is the lot's number of examples (fixed-size,
    shuffled) or ``q * n`` (Poisson), the gradients' denominator when a
    record is one example. A front end that adds parts overrides it; by
    default there are none."""
    del result, examples_denominator
    return []

  def discard_lot(self) -> int:
    """Drops a partly accumulated lot without releasing anything (eager).

    Returns:
      The number of batches that were in the lot.
    """
    if not self._built:
      return 0
    pending = int(self.batches_in_lot.numpy())
    if pending:
      if self.lot_state is not None:
        lot_lib.assign(self.lot_state, self._empty_lot())
      self.lot_records.assign(0.0)
      self.lot_examples.assign(0.0)
      self.batches_in_lot.assign(0)
    return pending
