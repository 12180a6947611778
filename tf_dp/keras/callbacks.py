"""``PrivacyBudget``: report epsilon each epoch, stop before a budget is spent.

Abadi et al.'s ``DPTrain`` loop as a Keras callback. It reads the ledger of
the model's ``DPOptimizer`` (nothing else), so what it reports is what the
accountant would compute after training.
"""

import math
import warnings
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, cast

from absl import logging

from tf_dp.analysis import checks
from tf_dp.analysis import correlated_noise_accounting
from tf_dp.analysis import event_accounting
from tf_dp.analysis import ledger as ledger_accounting
from tf_dp.analysis import dp_sgd_privacy as privacy_lib
from tf_dp.analysis.budget import max_additional_steps_for_events
from tf_dp.core import lot as lot_lib
from tf_dp.errors import PrivacyError
from tf_dp.errors import SamplingMismatchError
from tf_dp.keras import fit_order
from tf_dp.keras.backend import callback
from tf_dp.privacy_ledger import PrivacyLedger
from tf_dp.sampling import PrivacyUnit
from tf_dp.sampling import Sampling

# Runs of equal lots: (event, count); and the next lot with the most
# examples it may hold (None: a Poisson lot).
_Runs = Sequence[Tuple[ledger_accounting.LedgerEvent, int]]
_NextLot = Tuple[ledger_accounting.LedgerEvent, Optional[int]]


class _Callback(callback.Callback):
  """A tf_dp callback: the Keras interface of both flavours, and the model's
  DP engine."""

  def _engine(self) -> Any:
    engine = getattr(self.model.optimizer, "dp_engine", None)
    if engine is None:
      raise ValueError(f"{type(self).__name__} needs a model compiled with "
                       "tf_dp.DPOptimizer.")
    return engine


class LotBoundaryGuard(_Callback):
  """Keeps every lot inside one ``fit`` and every shuffled lot inside one
  pass over the data.

  Installed by ``make_private`` in every ``fit``. A lot of several batches
  (``gradient_accumulation_steps`` > 1) left open by an earlier ``fit``
  (stopped early, or ``steps_per_epoch`` not a multiple of the lot) is
  discarded at the start of the next one, with a warning: the new ``fit``
  draws new lots (a sampler's dataset starts a fresh draw), and a lot made
  of parts of two draws could hold an example twice. A lot of several
  shuffled batches that took batches from two epochs could too, which the
  ledger's fixed-size sample does not account for. So: when the number of
  steps per epoch is known and is not a multiple of the lot's batches,
  ``fit`` is refused with the fix; otherwise a lot still incomplete at the
  end of an epoch is discarded (nothing of it is released) with a warning.
  It also lifts the lot limits of an earlier budget at the start of ``fit``,
  and under ``sampling="fixed_order"`` closes the ledger's unfilled pass at
  the start of ``fit`` and the end of every epoch, where the order restarts
  (``fit_order.close_open_pass``).
  """

  def on_train_begin(self, logs: Optional[Dict[str, Any]] = None) -> None:
    del logs
    engine = getattr(self.model.optimizer, "dp_engine", None)
    if engine is None:
      return
    pending = engine.discard_lot()
    if pending:
      warnings.warn(
          f"tf_dp discarded an incomplete lot of {pending} batch(es) left "
          f"open by an earlier fit (nothing of it was released): a lot must "
          f"not mix batches of two fits. Make the steps of a fit a multiple "
          f"of gradient_accumulation_steps.", UserWarning)
    engine.lift_lot_limits()
    fit_order.close_open_pass(engine)
    k = engine.config.gradient_accumulation_steps
    steps = self.params.get("steps")
    if self._lots_span_epochs(engine) and steps and steps % k:
      raise SamplingMismatchError(
          f"With gradient_accumulation_steps={k} and {steps} steps per "
          f"epoch, a lot of shuffled batches would take batches from two "
          f"epochs and could contain an example twice. Use a number of "
          f"steps per epoch that is a multiple of {k} (choose batch_size, or "
          f"pass steps_per_epoch), or Poisson lots "
          f"(tf_dp.data.poisson_sampled_batches(..., batches_per_lot={k}) "
          f"with sampling='poisson').")

  @property  # Keras reads an attribute or a property alike.
  def train_batch_hooks(self) -> bool:  # type: ignore[override]
    """Counts the steps of an epoch only where lots could span epochs."""
    engine = getattr(getattr(self.model, "optimizer", None), "dp_engine",
                     None)
    return engine is not None and self._lots_span_epochs(engine)

  def on_epoch_begin(self, epoch: int,
                     logs: Optional[Dict[str, Any]] = None) -> None:
    del epoch, logs
    self._steps = 0

  def on_train_batch_end(self, batch: int,
                         logs: Optional[Dict[str, Any]] = None) -> None:
    del logs
    self._steps = batch + 1  # Keras passes the index of the last step run.

  def on_epoch_end(self, epoch: int,
                   logs: Optional[Dict[str, Any]] = None) -> None:
    del epoch, logs
    engine = getattr(self.model.optimizer, "dp_engine", None)
    if engine is not None:
      fit_order.close_open_pass(engine)
    if engine is None or not self._lots_span_epochs(engine):
      return
    # A failed last step (end of a dataset of unknown length) may already
    # have emptied the lot's counters: count the steps run instead.
    engine.discard_lot()
    pending = getattr(self, "_steps", 0) % (
        engine.config.gradient_accumulation_steps)
    if pending:
      warnings.warn(
          f"tf_dp discarded an incomplete lot of {pending} batch(es) at the "
          f"end of the epoch (nothing of it was released): a lot must not "
          f"take batches from two epochs. Make the steps per epoch a "
          f"multiple of gradient_accumulation_steps.", UserWarning)

  @staticmethod
  def _lots_span_epochs(engine: Any) -> bool:
    return (engine.config.gradient_accumulation_steps > 1
            and engine.config.sampling in (Sampling.SHUFFLED,
                                           Sampling.FIXED_ORDER))


class PrivacyBudget(_Callback):
  """Logs epsilon after each epoch and stops training before a target.

  Works with ``model.fit`` on Keras 3 and Keras 2 (it implements the
  callback interface itself). After each epoch ``logs["epsilon"]`` holds
  the epsilon of everything in the ledger (so it appears in the History and
  in TensorBoard, listed before or after this callback: ``make_private``'s
  ``fit`` runs budgets before the other callbacks), and the log says what
  it protects (``tf_dp.analysis.epsilon_statement``: "per example", or
  "per user" for a ``privacy_unit="user"`` optimizer's ledger).

  Privacy contract: with ``target_epsilon``, the lots left are planned as
  lots of the largest kind that can come: Poisson lots of the sampler's q,
  or fixed-size and shuffled lots of the most examples any lot recorded in
  the ledger held, or that ``fit``'s arrays can give (``batch_size`` times
  ``gradient_accumulation_steps``), whichever is larger; a short last
  batch never makes the plan cheaper. The DP step itself releases no lot
  beyond the planned number, and no fixed-size or shuffled lot larger than
  the planned size (such a lot is dropped, nothing of it released, and
  training stops with a warning), so epsilon never exceeds the target
  whatever the input, its batch sizes or ``steps_per_execution`` are.
  Before the first lot the plan comes from the optimizer (its noise
  multiplier, n, and the Poisson q or the lot size of ``fit``'s arrays):
  if one lot already exceeds the target, ``fit`` is refused before any
  step. Where the cost of a lot is known only from a first one (a custom
  ``dp_query``, private metrics, DP batch-norm statistics, microbatches,
  a pipeline of shuffled or fixed-size lots), that first lot is released;
  if it already exceeds the target, training stops after it with a
  warning and ``exceeded`` is True. A correlated-noise run
  (``DPOptimizer(noise_strategy=...)``, ``fit(..., shuffle=False)``) is
  planned exactly before its first step: it runs the most steps t of the
  strategy whose released rows, with ``ceil(t / steps per pass)``
  participations a pass apart, are (target_epsilon, delta)-DP
  (``correlated_noise_accounting.max_steps_within_budget``), the epsilon
  the ledger then reports.

  Args:
    delta: The delta of the reported (epsilon, delta).
    target_epsilon: Optional budget.
    orders: Renyi orders (RDP accountant only).
    accountant: ``"pld"`` (privacy loss distributions, the tightest) or
      ``"rdp"``; None means ``"pld"`` unless ``orders`` is given, as in
      ``tf_dp.analysis.compute_epsilon_from_ledger``.
    verbose: When this callback stops training, it prints why and at
      which epsilon on standard output at the end of ``fit`` (the reason is
      also kept in ``stop_reason``). False keeps it in ``stop_reason`` only.
  """

  def __init__(self, delta: float, target_epsilon: Optional[float] = None,
               orders: Optional[Iterable[float]] = None,
               accountant: Optional[str] = None,
               verbose: bool = True) -> None:
    super().__init__()
    self.delta = checks.check_delta("delta", delta)
    self.verbose = bool(verbose)
    self.stop_reason: Optional[str] = None
    self.target_epsilon = None if target_epsilon is None else (
        checks.check_epsilon("target_epsilon", target_epsilon,
                             allow_zero=False))
    self.orders = None if orders is None else list(orders)
    self.accountant = privacy_lib.resolve_accountant(accountant,
                                                     orders=orders)
    self.epsilons: List[float] = []
    self.exceeded = False
    self._allowed_lots: Optional[int] = None
    self._max_lot_examples: Optional[int] = None
    self.train_batch_hooks = target_epsilon is not None

  @property
  def ledger(self) -> PrivacyLedger:
    """The ledger of the model's ``tf_dp.DPOptimizer``."""
    return self._engine().ledger

  def _lots(self) -> int:
    return int(self.ledger.sample_count.numpy())

  def epsilon(self) -> float:
    """Epsilon at ``delta`` of every lot in the ledger so far."""
    return ledger_accounting.compute_epsilon_from_ledger(
        self.ledger, self.delta, orders=self.orders,
        accountant=self.accountant)[0]

  def _largest_next_lot(self, runs: _Runs) -> _NextLot:
    """``(event, examples)``: the costliest lot that can come next, as a
    ``LedgerEvent``, and the most examples it may hold (None for Poisson
    lots, whose q is the sampler's whatever size is drawn). A lot that
    released nothing (one that closes a fixed-order pass) says nothing of
    the next: ``runs`` must hold one that released something."""
    runs = [(e, c) for e, c in runs if not math.isinf(e.noise_multiplier)]
    last = runs[-1][0]
    if last.sampling == Sampling.POISSON:
      return last, None
    engine = self._engine()
    n = engine.recorded_population_size()
    lot = max(round(e.sampling_probability * e.population_size)
              for e, _ in runs if e.sampling != Sampling.POISSON)
    lot = min(n, max(lot, engine.expected_lot_examples or 0))
    return ledger_accounting.LedgerEvent(
        last.sampling, lot / n, last.noise_multiplier, n,
        last.examples_per_record, last.privacy_unit), lot

  def _plan(self) -> None:
    """Plans the lots left within ``target_epsilon`` (set whenever it
    runs)."""
    if getattr(self.ledger, "correlated_noise", None) is not None:
      self._plan_correlated_noise(self.ledger.correlated_noise)
      return
    runs = ledger_accounting.ledger_event_runs(self.ledger)
    if any(not math.isinf(e.noise_multiplier) for e, _ in runs):
      next_lot, self._max_lot_examples = self._largest_next_lot(runs)
    else:
      first = self._first_lot()
      if first is None:
        return
      next_lot, self._max_lot_examples = first
    more = max_additional_steps_for_events(
        runs, next_lot, cast(float, self.target_epsilon), self.delta,
        accountant=self.accountant, orders=self.orders)
    if not runs and more == 0:
      raise PrivacyError(
          f"PrivacyBudget(target_epsilon={self.target_epsilon:g}) cannot "
          f"be met: a single lot ({self._lot_description(next_lot)}) "
          f"already costs epsilon = {self._cost(next_lot):.3g} at delta = "
          f"{self.delta:g}. Nothing was released. Raise noise_multiplier "
          f"(tf_dp.analysis.compute_noise_multiplier gives one for the "
          f"target), use smaller lots, or raise target_epsilon.")
    self.exceeded = more < 0
    if self.exceeded:
      warnings.warn(
          f"PrivacyBudget: the lots released so far already exceeded "
          f"target_epsilon={self.target_epsilon:g} (epsilon = "
          f"{self.epsilon():.3g}); training stops. The cost of a lot of a "
          f"custom dp_query, private metrics or DP batch-norm statistics "
          f"is known only from its first lot.", UserWarning)
    self._allowed_lots = sum(count for _, count in runs) + max(more, 0)

  def _first_lot(self) -> Optional[_NextLot]:
    """``(event, examples)`` of the first lot, from the optimizer and
    ``fit``'s arrays, before any is recorded; None when that is not known
    beforehand (a custom ``dp_query``, private metrics, DP batch-norm
    statistics or an optimizer not built yet, microbatches, lots of users
    of unknown size, or a fixed-size or shuffled lot from a pipeline). The
    noise multiplier is taken a hair lower than the optimizer's (the ledger
    records the query's float32 stddev), so the plan never undercounts."""
    engine = self._engine()
    config = engine.config
    if (config.dp_query is not None or config.noise_multiplier is None
        or not engine.noises_gradients_only  # None: not yet known.
        or config.num_microbatches is not None
        or engine.population_size is None):
      return None
    n = int(engine.population_size)
    lot = None  # A Poisson lot's event does not depend on its size.
    if config.sampling is not Sampling.POISSON:
      lot = engine.expected_lot_examples
      if lot is None or config.privacy_unit is not PrivacyUnit.EXAMPLE:
        return None
      lot = min(n, int(lot))
    # One example per record: no microbatches.
    event = lot_lib.lot_sampling_event(config, n, lot, lot)
    return ledger_accounting.LedgerEvent(
        event.sampling, float(event.sampling_probability),
        float(config.noise_multiplier) * (1 - 1e-6), n,
        int(event.examples_per_record), event.privacy_unit), lot

  @staticmethod
  def _lot_description(event: ledger_accounting.LedgerEvent) -> str:
    return (f"{event.sampling} sampling, q = {event.sampling_probability:.4g}"
            f" of n = {event.population_size}, noise_multiplier = "
            f"{event.noise_multiplier:.4g}")

  def _cost(self, event: ledger_accounting.LedgerEvent) -> float:
    return event_accounting.epsilon_of_runs(
        [(event, 1)], self.delta, accountant=self.accountant,
        orders=self.orders)[0]

  def _plan_correlated_noise(self, record: Any) -> None:
    """Allows the most steps of the strategy whose release fits the
    target (``correlated_noise_accounting.max_steps_within_budget``), with
    the noise multiplier the record will be accounted with: the recorded
    one after a first step, else the optimizer's, a hair lower (the query
    keeps its stddev in floating point)."""
    steps_per_pass = int(record.steps_per_pass.numpy())
    if not steps_per_pass:
      raise PrivacyError(
          "PrivacyBudget plans a correlated-noise run from the steps of one "
          "pass in a fixed order, which only fit(x, y, shuffle=False) on "
          "arrays declares. Train with fit, or stop the loop yourself at "
          "correlated_noise_accounting.max_steps_within_budget.")
    steps_run = int(record.steps_run.numpy())
    if steps_run:
      multiplier = correlated_noise_accounting.check_run(
          record.to_dict())["noise_multiplier"]
    else:
      multiplier = self._engine().config.noise_multiplier * (1 - 1e-6)
    self._max_lot_examples = None
    self._allowed_lots = correlated_noise_accounting.max_steps_within_budget(
        record.strategy, multiplier, cast(float, self.target_epsilon),
        self.delta, steps_per_pass, record.neighbouring)
    self.exceeded = self._allowed_lots < steps_run

  def _limit_lots(self) -> None:
    """Plans, then lets the DP step release only the lots that fit.

    Before any lot is recorded the cost of one is unknown, so exactly one
    more lot is allowed; the step itself skips (releases nothing, changes
    no weight) once the ledger holds the allowed number of lots, so the
    limit holds per step even when Keras runs several steps
    (``steps_per_execution``) between two callback calls.
    """
    self._plan()
    engine = self._engine()
    allowed = self._allowed_lots
    if allowed is None:
      allowed = self._lots() + 1
    engine.allowed_lots.assign(allowed)
    engine.max_lot_examples.assign(float(
        "inf" if self._max_lot_examples is None else self._max_lot_examples))

  def on_train_begin(self, logs: Optional[Dict[str, Any]] = None) -> None:
    del logs
    self.ledger  # pylint: disable=pointless-statement
    self._allowed_lots = None
    self._max_lot_examples = None
    self.stop_reason = None
    if self.target_epsilon is not None:
      self._limit_lots()

  def on_train_batch_end(self, batch: int,
                         logs: Optional[Dict[str, Any]] = None) -> None:
    del batch, logs
    if self.target_epsilon is None:
      return
    if self._allowed_lots is None:
      self._limit_lots()
    if int(self._engine().oversized_lots.numpy()):
      self.model.stop_training = True
      warnings.warn(
          f"PrivacyBudget stopped training: a lot held more than the "
          f"{self._max_lot_examples} examples its plan paid for, and was "
          f"dropped (nothing of it released). Give fit batches of one size "
          f"(the first lots decide the plan), or arrays.", UserWarning)
      self._engine().oversized_lots.assign(0)
      self.stop_reason = (
          "a lot held more examples than its plan paid for and was dropped")
    if self._allowed_lots is not None and self._lots() >= self._allowed_lots:
      self.model.stop_training = True
      if self.stop_reason is None:
        self.stop_reason = (
            "the next lot would take epsilon past target_epsilon="
            f"{self.target_epsilon:g}" if not self.exceeded else
            "the lots released already exceed target_epsilon="
            f"{self.target_epsilon:g}")

  def _statement(self, eps: float) -> str:
    return ledger_accounting.epsilon_statement(
        eps, self.delta, ledger_accounting.ledger_privacy_unit(self.ledger))

  def on_train_end(self, logs: Optional[Dict[str, Any]] = None) -> None:
    del logs
    if self.stop_reason is None:
      return
    message = (
        f"tf_dp PrivacyBudget stopped training after {self._lots()} lots: "
        f"{self.stop_reason}. "
        f"{self._statement(self.epsilon())}")
    logging.info(message)
    if self.verbose:
      print(message, flush=True)

  def on_epoch_end(self, epoch: int,
                   logs: Optional[Dict[str, Any]] = None) -> None:
    del epoch
    eps = self.epsilon()
    self.epsilons.append(eps)
    logging.info("tf_dp: %s", self._statement(eps))
    if logs is not None:
      logs["epsilon"] = eps
    if self.target_epsilon is not None:
      self._limit_lots()


def with_tf_dp_callbacks(callbacks: Optional[Iterable[Any]]) -> List[Any]:
  """The callbacks of a ``fit`` as ``make_private`` runs them.

  A ``LotBoundaryGuard`` comes first, then every ``PrivacyBudget``, then
  the user's other callbacks in their order: a logger (TensorBoard,
  CSVLogger, History) reads the epoch's logs in its own ``on_epoch_end``,
  so the budget must have written ``logs["epsilon"]`` before it runs,
  whatever order the user listed them in.

  Args:
    callbacks: The ``callbacks`` given to ``fit`` (a list, or None).

  Returns:
    A new list.
  """
  callbacks = list(callbacks or [])
  budgets = [c for c in callbacks if isinstance(c, PrivacyBudget)]
  others = [c for c in callbacks if not isinstance(c, PrivacyBudget)]
  return [LotBoundaryGuard()] + budgets + others
