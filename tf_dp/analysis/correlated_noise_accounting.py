"""Accounting of a correlated-noise run from its ledger record, pure Python.

A run of ``CorrelatedNoiseQuery`` is recorded (``tf_dp.
correlated_noise_ledger.CorrelatedNoiseLedger``) as one event of its own
kind: the strategy (kind, steps it was built for, coefficients or tree
height, and a fingerprint of them), the clip and noise stddev, the
participation scheme promised and the one run (passes over the data and the
fewest steps between two participations of one example), the neighbouring
relation and the number of steps run. Its epsilon is that of one Gaussian
mechanism ``C x + z`` (``matrix_factorization``): ``mu = span * sens /
noise_multiplier``, with ``sens`` the sensitivity, for the passes and
separation actually run, of the strategy's rows released by the steps run
(``matrix_factorization.released_matrix``: a run stopped before the
strategy's last step is accounted for what it released, which is how
``tf_dp.keras.PrivacyBudget`` plans one). Sampling amplification is never
used.

Every field of a record is checked on reading (the table ``_FIELDS``): a
missing, unknown or invalid one is a ``LedgerFormatError`` naming it. A
record is refused (``PrivacyError``) when the run left what the strategy
was accounted for: more steps than it was built for, more passes or less
separation than promised, a clip or stddev that changed during the run,
steps the ledger and the query counted differently, or a fingerprint that
does not match the coefficients.
"""

import json
import math
from typing import Any, Dict, Optional

from tf_dp.analysis import checks
from tf_dp.analysis import ledger_schema
from tf_dp.analysis import matrix_factorization as mf
from tf_dp.analysis import search
from tf_dp.errors import LedgerFormatError
from tf_dp.errors import PrivacyError

FORMAT = "tf_dp.correlated_noise_ledger/1"

# The fields of a record and of its strategy, one check per key (a key not
# listed is refused).
_STRATEGY_FIELDS = {
    "kind": lambda where, value: checks.check_choice(where, value, mf.KINDS),
    "steps": ledger_schema.int_at_least(1),
    "coefficients": lambda where, value: tuple(
        checks.check_real(f"{where}[{i}]", c, allow_inf=False)
        for i, c in enumerate(ledger_schema.read_list(where, value))),
    "height": ledger_schema.int_at_least(0),
    "fingerprint": lambda where, value: value,  # Compared after reading.
}
_FIELDS = {
    "format": lambda where, value: value,  # Checked before reading.
    "strategy": lambda where, value: strategy_from_dict(value, where),
    "l2_norm_clip": checks.check_non_negative,
    "noise_stddev": checks.check_non_negative,
    "neighbouring": lambda where, value: checks.check_choice(
        where, value, tuple(mf.NEIGHBOURING)),
    "promised_passes": ledger_schema.int_at_least(1),
    "promised_min_separation": ledger_schema.int_at_least(1),
    "passes": ledger_schema.int_at_least(0),
    # The fewest steps between two participations; None for one pass.
    "min_separation": lambda where, value: None if value is None else (
        checks.check_steps(where, value, integral_float=True)),
    "steps_run": ledger_schema.int_at_least(0),
    "inconsistent_steps": ledger_schema.int_at_least(0),
}


def strategy_to_dict(strategy: mf.Strategy) -> Dict[str, Any]:
  """The JSON form of a strategy, with its fingerprint."""
  return {"kind": strategy.kind, "steps": strategy.steps,
          "coefficients": list(strategy.coefficients),
          "height": strategy.height, "fingerprint": strategy.fingerprint()}


def strategy_from_dict(data: Dict[str, Any],
                       where: str = "strategy") -> mf.Strategy:
  """The strategy of ``strategy_to_dict``; checks its fingerprint.

  Raises:
    LedgerFormatError: on a missing, unknown or invalid field, or a
      fingerprint that does not match the coefficients.
  """
  fields = ledger_schema.read_object(where, data, _STRATEGY_FIELDS)
  fingerprint = fields.pop("fingerprint")
  try:
    strategy = mf.Strategy(**fields)
  except ValueError as e:
    raise LedgerFormatError(f"{where}: {e}") from None
  if fingerprint != strategy.fingerprint():
    raise LedgerFormatError(
        f"The strategy's fingerprint {fingerprint!r} does not match its "
        f"kind, steps and coefficients ({strategy.fingerprint()!r}): the "
        f"record was altered.")
  return strategy


def _record(ledger):
  """The record's fields, read and checked (``_FIELDS``)."""
  if isinstance(ledger, str):
    try:
      ledger = json.loads(ledger)
    except json.JSONDecodeError as e:
      raise LedgerFormatError(f"ledger is not valid JSON: {e}.") from None
  if hasattr(ledger, "to_dict"):
    ledger = ledger.to_dict()
  if not isinstance(ledger, dict):
    raise ValueError("ledger must be a CorrelatedNoiseLedger, its to_dict() "
                     f"export or that as JSON; got {type(ledger).__name__}.")
  if ledger.get("format") != FORMAT:
    raise LedgerFormatError(f"format must be {FORMAT!r}; got "
                            f"{ledger.get('format')!r}.")
  return ledger_schema.read_object("", ledger, _FIELDS,
                                   label="A correlated-noise record")


def check_run(ledger: Any) -> Dict[str, Any]:
  """The validated record, refused if the run left its promise.

  Returns:
    ``{"strategy", "noise_multiplier", "passes", "min_separation",
    "neighbouring", "steps_run"}``.

  Raises:
    PrivacyError: naming what the run did beyond the strategy's promise.
    LedgerFormatError: on a malformed record.
  """
  r = _record(ledger)
  strategy, steps_run, passes = r["strategy"], r["steps_run"], r["passes"]
  if steps_run > strategy.steps:
    raise PrivacyError(
        f"The run released {steps_run} steps but the strategy was built for "
        f"{strategy.steps}: its sensitivity does not cover the extra steps. "
        f"Build the strategy for at least {steps_run} steps.")
  if r["inconsistent_steps"]:
    raise PrivacyError(
        f"{r['inconsistent_steps']} step(s) were released with another "
        f"clip or noise stddev than the first, out of the strategy's "
        f"order (the query's and the ledger's step counts differ), or "
        f"outside the fixed-order passes a fit declared (train_on_batch or "
        f"private_step after fit): the strategy's sensitivity assumes one "
        f"clip and one stddev throughout, and the participation recorded "
        f"holds for the declared passes only.")
  if steps_run and not passes:
    raise PrivacyError(
        "The ledger does not say how often an example took part: record the "
        "participation run (CorrelatedNoiseLedger.record_participation).")
  if passes > r["promised_passes"]:
    raise PrivacyError(
        f"An example took part {passes} times but the strategy was promised "
        f"at most {r['promised_passes']}. Build the ledger for {passes} "
        f"passes.")
  separation, promised_sep = r["min_separation"], r["promised_min_separation"]
  if passes > 1 and (separation is None or separation < promised_sep):
    raise PrivacyError(
        f"Two participations of one example were {separation} steps apart, "
        f"fewer than the promised min_separation={promised_sep}: the "
        f"strategy's sensitivity does not hold. Keep the order of the "
        f"examples fixed across passes (one shuffle) with at least "
        f"{promised_sep} steps per pass.")
  clip, stddev = r["l2_norm_clip"], r["noise_stddev"]
  return {"strategy": strategy,
          "noise_multiplier": math.inf if clip == 0 else stddev / clip,
          "passes": max(passes, 1),
          "min_separation": separation if passes > 1 else None,
          "neighbouring": r["neighbouring"], "steps_run": steps_run}


def correlated_noise_epsilon(ledger: Any, delta: float) -> float:
  """Epsilon at ``delta`` of everything a correlated-noise ledger records.

  Privacy contract: the run is one Gaussian mechanism ``C x + z`` of the
  rows of C its steps released; its ``mu`` is ``span *
  strategy.released_sensitivity(steps_run, passes, min_separation) /
  noise_multiplier`` for the passes and separation actually run (span 1
  for zero-out neighbours, 2 for replace-one), and epsilon is the exact
  (epsilon, delta) of mu-GDP. A run with no steps costs nothing; a clip of
  0 releases nothing; noise 0 with a clip > 0 is epsilon = inf.

  Raises:
    PrivacyError: if the run left the strategy's promise (``check_run``).
  """
  delta = checks.check_delta("delta", delta)
  run = check_run(ledger)
  if run["steps_run"] == 0 or math.isinf(run["noise_multiplier"]):
    return 0.0
  return epsilon_after_steps(run["strategy"], run["steps_run"],
                             run["noise_multiplier"], delta,
                             run["neighbouring"], run["passes"],
                             run["min_separation"])


def epsilon_after_steps(strategy: mf.Strategy, steps_run: int,
                        noise_multiplier: float, delta: float,
                        neighbouring: str = "replace_one",
                        passes: int = 1,
                        min_separation: Optional[int] = None) -> float:
  """Epsilon at ``delta`` of the first ``steps_run`` steps of ``strategy``.

  Privacy contract: what those steps released is the Gaussian mechanism of
  the strategy's rows whose noise they drew
  (``matrix_factorization.released_matrix``); its ``mu`` is ``span *
  strategy.released_sensitivity(steps_run, passes, min_separation) /
  noise_multiplier`` and epsilon the exact (epsilon, delta) of mu-GDP. A
  run stopped early is accounted for what it released, never for less.
  """
  sens = strategy.released_sensitivity(steps_run, passes, min_separation)
  if sens == 0:
    return 0.0
  return mf.epsilon_of_mu(mf.gdp_mu(sens, noise_multiplier, neighbouring),
                          delta)


def max_steps_within_budget(strategy: mf.Strategy, noise_multiplier: float,
                            target_epsilon: float, delta: float,
                            steps_per_pass: int,
                            neighbouring: str = "replace_one") -> int:
  """The most steps (at most ``strategy.steps``) whose release is
  (target_epsilon, delta)-DP, the examples taken in one fixed order with
  ``steps_per_pass`` steps per pass.

  Privacy contract: after t such steps an example took part at most
  ``ceil(t / steps_per_pass)`` times, ``steps_per_pass`` steps apart, which
  is what the ledger records for them; epsilon is ``epsilon_after_steps``
  of that, nondecreasing in t, so the answer is exact: t steps fit the
  budget and t + 1 do not (or t is ``strategy.steps``).

  Raises:
    PrivacyError: as ``Strategy.released_sensitivity`` for passes closer
      than the strategy's bands.
  """
  target_epsilon = checks.check_epsilon("target_epsilon", target_epsilon,
                                        allow_zero=False)
  per_pass = checks.check_positive_int("steps_per_pass", steps_per_pass)

  def fits(t):
    passes = max(1, -(-t // per_pass))
    return epsilon_after_steps(
        strategy, t, noise_multiplier, delta, neighbouring, passes,
        per_pass if passes > 1 else None) <= target_epsilon

  if fits(strategy.steps):
    return strategy.steps
  # fits(0) holds: the largest such t below strategy.steps.
  return int(search.monotone_boundary(fits, start=0,
                                      limit=strategy.steps)[0])
