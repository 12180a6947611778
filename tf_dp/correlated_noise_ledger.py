"""The ledger of a correlated-noise run, in ``tf.Variable``s.

One record for the whole run (a correlated-noise release is one Gaussian
mechanism, not a composition of per-step ones): the strategy, the
participation scheme it was promised (passes, min separation) and the one
actually run, the neighbouring relation, and per step only a count and a
check that every step used the first step's clip and stddev in the
strategy's order. ``tf_dp.analysis.correlated_noise_accounting`` computes
epsilon from its ``to_dict()``.
"""

import json
from typing import Any, Callable, Dict, Optional

import numpy as np
import tensorflow as tf

from tf_dp.analysis import checks
from tf_dp.analysis import correlated_noise_accounting as accounting
from tf_dp.analysis import matrix_factorization as mf
from tf_dp.dp_query import events as events_lib
from tf_dp.errors import PrivacyError

# The variables of a record that change as the run goes (a file holds them
# under these names), and ``FIXED_FIELDS``: the JSON of the fields fixed
# when the ledger is made (strategy, promise, neighbouring relation), kept
# in a string variable so that a file holds the whole record.
COUNTERS = ("l2_norm_clip", "noise_stddev", "passes", "min_separation",
            "steps_run", "inconsistent_steps")
FIXED_FIELDS = "fixed_fields"


def record_from_values(read: Callable[[str], Any]) -> Dict[str, Any]:
  """The record (``CorrelatedNoiseLedger.to_dict()``) from its variables'
  values, ``read(name)`` for each of ``FIXED_FIELDS`` and ``COUNTERS``
  (from memory or from a file)."""
  fixed = read(FIXED_FIELDS)
  record = json.loads(fixed.decode() if isinstance(fixed, bytes) else fixed)
  values = {name: np.asarray(read(name)).item() for name in COUNTERS}
  if values["min_separation"] == tf.int64.max:
    values["min_separation"] = None
  for name in ("l2_norm_clip", "noise_stddev"):
    values[name] = float(values[name])
  record.update(values)
  return record


class CorrelatedNoiseLedger(tf.Module):
  """Records the steps of a ``CorrelatedNoiseQuery`` run.

  Privacy contract: ``record_sample`` counts every released step and
  counts as *inconsistent* a step whose clip or stddev differs from the
  first step's, whose index is not the count so far (the query's state
  and the ledger out of step, e.g. one restored without the other), or
  which comes after fixed-order passes were declared
  (``set_steps_per_pass``) but outside the steps they were declared for
  (``train_on_batch`` or ``private_step`` after a ``fit``: its examples
  are not a pass's, so the participation recorded for it would not
  hold); the
  accountant refuses a ledger with inconsistent steps, with more steps
  than the strategy was built for, or with a participation scheme beyond
  the promise. ``record_participation`` must be told the passes and the
  fewest steps between two participations of one example that were run.

  Args:
    strategy: The ``matrix_factorization.Strategy`` of the query.
    passes: The most times one example may take part (promised).
    min_separation: With ``passes > 1``, the fewest steps between two
      participations of one example (promised); the strategy's
      sensitivity must be computable for it.
    neighbouring: ``"replace_one"`` (default: one example replaced, the
      relation of tf_dp's shuffled and fixed-size lots) or ``"zero_out"``
      (one example's gradients replaced by zeros, the papers' relation).
    name: Module name.

  Raises:
    PrivacyError: if the strategy's sensitivity is not bounded for the
      promised scheme.
  """

  def __init__(self, strategy: mf.Strategy, passes: int = 1,
               min_separation: Optional[int] = None,
               neighbouring: str = "replace_one",
               name: str = "correlated_noise_ledger") -> None:
    super().__init__(name=name)
    if not isinstance(strategy, mf.Strategy):
      raise TypeError(f"strategy must be a matrix_factorization.Strategy; "
                      f"got {strategy!r}.")
    self._strategy = strategy
    self._passes = checks.check_positive_int("passes", passes)
    if self._passes > 1:
      min_separation = checks.check_positive_int(
          "min_separation", min_separation,
          " It is the fewest steps between two participations of one "
          "example (the steps of one pass, with a fixed order).")
    self._min_separation = min_separation or strategy.steps
    self._neighbouring = checks.check_choice("neighbouring", neighbouring,
                                             tuple(mf.NEIGHBOURING))
    strategy.sensitivity(self._passes, self._min_separation)  # refuses early
    f64 = tf.float64
    self.fixed_fields = tf.Variable(self._fixed_fields_json(),
                                    dtype=tf.string, trainable=False,
                                    name=f"{name}/{FIXED_FIELDS}")
    self.steps_run = tf.Variable(0, dtype=tf.int64, trainable=False,
                                 name=f"{name}/steps_run")
    self.inconsistent_steps = tf.Variable(0, dtype=tf.int64, trainable=False,
                                          name=f"{name}/inconsistent_steps")
    self.l2_norm_clip = tf.Variable(0.0, dtype=f64, trainable=False,
                                    name=f"{name}/l2_norm_clip")
    self.noise_stddev = tf.Variable(0.0, dtype=f64, trainable=False,
                                    name=f"{name}/noise_stddev")
    self.passes = tf.Variable(0, dtype=tf.int64, trainable=False,
                              name=f"{name}/passes")
    # Steps of one pass over examples in a fixed order (0: not known; a
    # custom loop then records its participation itself).
    self.steps_per_pass = tf.Variable(0, dtype=tf.int64, trainable=False,
                                      name=f"{name}/steps_per_pass")
    # The step count at which the declared fixed-order passes end: a step
    # at or beyond it, with steps_per_pass declared, is inconsistent.
    self.declared_steps_end = tf.Variable(
        0, dtype=tf.int64, trainable=False, name=f"{name}/declared_steps_end")
    # SHA-256 of the examples of a fixed-order pass ("" until declared).
    self.data_digest = tf.Variable("", dtype=tf.string, trainable=False,
                                   name=f"{name}/data_digest")
    # The fewest steps seen between two participations (int64 max: none).
    self.min_separation = tf.Variable(tf.int64.max, dtype=tf.int64,
                                      trainable=False,
                                      name=f"{name}/min_separation")

  @property
  def strategy(self) -> mf.Strategy:
    return self._strategy

  @property
  def neighbouring(self) -> str:
    """The neighbouring relation epsilon is stated for."""
    return self._neighbouring

  @property
  def sample_count(self) -> tf.Tensor:
    """Steps recorded so far (int64 tensor)."""
    return self.steps_run.read_value()

  def record_sample(self, event: Any) -> tf.Tensor:
    """Records one released step (graph-safe); returns True.

    ``event`` is the ``CorrelatedNoiseEvent`` of the step (or a structure
    holding exactly one, beside ``NoOpEvent``s); no sampling event is
    recorded: the record's privacy never comes from sampling.
    """
    found = [e for e in tf.nest.flatten(event)
             if isinstance(e, events_lib.CorrelatedNoiseEvent)]
    if len(found) != 1:
      raise TypeError(f"A CorrelatedNoiseLedger records the "
                      f"CorrelatedNoiseEvent of one CorrelatedNoiseQuery; "
                      f"got {event!r}.")
    event = found[0]
    clip = tf.cast(event.l2_norm_clip, tf.float64)
    stddev = tf.cast(event.noise_stddev, tf.float64)
    step = tf.cast(event.step, tf.int64)
    count = self.steps_run.read_value()
    first = tf.equal(count, 0)
    same = tf.logical_and(tf.equal(clip, self.l2_norm_clip),
                          tf.equal(stddev, self.noise_stddev))
    per_pass = self.steps_per_pass.read_value()
    known = per_pass > 0
    outside_passes = tf.logical_and(
        known, count >= self.declared_steps_end.read_value())
    consistent = tf.logical_and(
        tf.logical_and(tf.logical_or(first, same), tf.equal(step, count)),
        tf.logical_not(outside_passes))
    writes = [
        self.l2_norm_clip.assign(tf.where(first, clip, self.l2_norm_clip)),
        self.noise_stddev.assign(tf.where(first, stddev, self.noise_stddev)),
        self.inconsistent_steps.assign_add(
            tf.cast(tf.logical_not(consistent), tf.int64))]
    passes = tf.where(known, count // tf.maximum(per_pass, 1) + 1,
                      tf.zeros([], tf.int64))
    writes.append(self.record_participation(passes, per_pass))
    with tf.control_dependencies(writes):
      with tf.control_dependencies([self.steps_run.assign_add(1)]):
        return tf.constant(True)

  def set_steps_per_pass(self, steps: int, data_digest: str,
                         passes: int) -> None:
    """``check_steps_per_pass(steps, data_digest)``, then declares that the
    next ``passes`` whole passes take the examples in that order (eager).

    Steps after them (or after ``end_declared_passes``) are counted as
    inconsistent until passes are declared again.
    """
    self.check_steps_per_pass(steps, data_digest)
    passes = checks.check_steps("passes", passes)
    self.steps_per_pass.assign(steps)
    self.data_digest.assign(data_digest)
    self.declared_steps_end.assign(self.steps_run + passes * steps)

  def end_declared_passes(self) -> None:
    """Ends the declared passes at the steps run so far (eager): a
    ``fit`` that declared them has returned or stopped."""
    self.declared_steps_end.assign(tf.minimum(self.declared_steps_end,
                                              self.steps_run))

  def check_steps_per_pass(self, steps: int, data_digest: str = "") -> None:
    """Checks (eager) a declaration that the steps to come take the
    examples in one fixed order, ``steps`` steps per pass, each example
    once per pass: every step then records the passes so far and a
    separation of ``steps`` (``Keras fit(..., shuffle=False)`` on arrays).

    ``data_digest`` names the examples of a pass in their order and how
    they are cut into steps (a hash); it must stay the same for the whole
    run.

    Raises:
      PrivacyError: if another number of steps per pass or another
        ``data_digest`` was declared, or the steps run so far end inside a
        pass (the next pass would start the order again early: less
        separation than recorded).
    """
    steps = checks.check_positive_int("steps_per_pass", steps)
    declared = int(self.steps_per_pass.numpy())
    run = int(self.steps_run.numpy())
    if declared not in (0, steps):
      raise PrivacyError(
          f"This correlated-noise run took {declared} steps per pass; a "
          f"pass of {steps} steps would bring two participations of one "
          f"example closer than recorded. Keep the batch size (and the "
          f"training examples) of the first fit.")
    known = self.data_digest.numpy().decode()
    if known and known != data_digest:
      raise PrivacyError(
          "These training examples differ from those of the first passes "
          "of this correlated-noise run, or are cut into steps differently "
          "(another order, other examples, or another batch size or "
          "gradient_accumulation_steps): an example could then take part "
          "in two steps closer than a pass apart. Continue with the same "
          "examples in the same order and the same lots.")
    if run and (declared == 0 or run % steps):
      raise PrivacyError(
          f"{run} steps were run before, which is not a whole number of "
          f"passes of {steps} steps in the recorded order: restarting the "
          f"order now would bring participations of one example closer than "
          f"{steps} steps. Continue only after whole passes (no "
          f"steps_per_epoch, no interrupted fit).")

  def record_participation(self, passes: Any, min_separation: Any) -> Any:
    """Records how one example took part in the run so far (graph-safe):
    the passes (kept as the largest seen) and the fewest steps between two
    of its participations (kept as the smallest seen; ignored for one
    pass)."""
    passes = tf.cast(passes, tf.int64)
    separation = tf.where(passes > 1, tf.cast(min_separation, tf.int64),
                          tf.constant(tf.int64.max, tf.int64))
    return tf.group(
        self.passes.assign(tf.maximum(self.passes, passes)),
        self.min_separation.assign(tf.minimum(self.min_separation,
                                              separation)))

  def _fixed_fields_json(self) -> str:
    return json.dumps({
        "format": accounting.FORMAT,
        "strategy": accounting.strategy_to_dict(self._strategy),
        "neighbouring": self._neighbouring,
        "promised_passes": self._passes,
        "promised_min_separation": self._min_separation}, sort_keys=True)

  def to_dict(self) -> Dict[str, Any]:
    """The record as plain data (eager), for
    ``correlated_noise_accounting``.

    Raises:
      PrivacyError: if a restored file's record was made for another
        strategy, promise or neighbouring relation than this ledger's.
    """
    if self.fixed_fields.numpy().decode() != self._fixed_fields_json():
      raise PrivacyError(
          "The correlated-noise record restored from a file was made for "
          "another strategy, promised participation or neighbouring "
          "relation than this optimizer's: its steps were not accounted "
          "for this one. Restore it into an optimizer built with the run's "
          "own DPOptimizer(..., noise_strategy=..., max_passes=...), or "
          "read it with tf_dp.estimator.ledger_from_checkpoint.")
    return record_from_values(lambda name: getattr(self, name).numpy())

  def epsilon(self, delta: float) -> float:
    """``correlated_noise_accounting.correlated_noise_epsilon`` of this
    record (eager)."""
    return accounting.correlated_noise_epsilon(self.to_dict(), delta)
