"""Post-hoc accounting of a privacy ledger (McMahan & Andrew 2018, Sec. 5).

Reads a ledger (a ``tf_dp.PrivacyLedger``, its ``to_dict()`` export, or that
export as JSON) as plain data, reduces each sample's Gaussian sum queries to
one equivalent query with eq. (1),

    z = (sum_g (S_g / sigma_g)^2)^(-1/2)

(``allocation.effective_noise_multiplier``), and composes the samples with
the PLD accountant (default) or the RDP accountant (``event_accounting``);
each sample is accounted under its own
neighbouring relation (Poisson: add/remove one record; fixed-size and
shuffled: replace one; fixed-order lots as passes without amplification,
replace one: ``fixed_order``). No TensorFlow is imported.
``ledger_events`` gives the same reduction as plain event descriptions so
that any other accountant can re-process the ledger; ``ledger_event_runs``
gives them run-length encoded, ``(event, count)``, for long ledgers. The
format itself (versions 1 and 2, every field's check) is defined in
``ledger_schema``.
"""

import json
import math
import numbers
import warnings
import weakref
from typing import Any, Iterable, List, NamedTuple, Optional, Tuple

import numpy as np

from tf_dp.analysis import allocation
from tf_dp.analysis import checks
from tf_dp.analysis import correlated_noise_accounting
from tf_dp.analysis import event_accounting
from tf_dp.analysis import fixed_order
from tf_dp.analysis import ledger_schema
from tf_dp.errors import IncompleteLedgerError
from tf_dp.errors import LedgerFormatError
from tf_dp.errors import PrivacyError
from tf_dp.sampling import PrivacyUnit
from tf_dp.sampling import Sampling

# A ledger in any form the accountant reads: a PrivacyLedger (anything with
# its to_dict), its to_dict() export, or that export as JSON text.
LedgerLike = Any


class LedgerEvent(NamedTuple):
  """One recorded sample as an accounting event (plain, immutable values).

  Fields: ``sampling`` (a ``tf_dp.sampling.Sampling``),
  ``sampling_probability`` (q), ``noise_multiplier`` (eq. (1) of the
  sample's sum queries), ``population_size``, ``examples_per_record`` and
  ``privacy_unit`` (``"example"`` or ``"user"``: what n counts, what q is
  the probability of, and what epsilon protects).
  """
  sampling: str
  sampling_probability: float
  noise_multiplier: float
  population_size: int
  examples_per_record: int
  privacy_unit: str = PrivacyUnit.EXAMPLE


def _export(ledger):
  """The raw export dict of a ledger object, dict or JSON string."""
  if isinstance(ledger, str):
    try:
      return json.loads(ledger)
    except json.JSONDecodeError as e:
      raise LedgerFormatError(
          f"ledger is a string but not valid JSON: {e}.") from None
  if hasattr(ledger, "to_dict"):
    # Run-length encoded: no per-sample expansion of long runs.
    return ledger.to_dict(ledger_format=ledger_schema.FORMAT_V2)
  if isinstance(ledger, dict):
    return ledger
  raise ValueError("ledger must be a PrivacyLedger, its to_dict() export or "
                   f"that export as JSON; got {type(ledger).__name__}.")


def ledger_runs(ledger: LedgerLike) -> List[ledger_schema.Run]:
  """The validated ``ledger_schema.Run`` list of a ledger (any form).

  Raises:
    LedgerFormatError: on an invalid field (see ``ledger_schema``).
    IncompleteLedgerError: if the ledger was full and did not record every
      sample.
  """
  runs, dropped = ledger_schema.decode(_export(ledger))
  if dropped:
    raise IncompleteLedgerError(
        f"The ledger was full and did not record {dropped} sample(s): epsilon "
        "cannot be computed. Create the PrivacyLedger with max_samples of at "
        "least the number of training steps.")
  return runs


def sample_noise_multiplier(sum_queries: Iterable[Any]) -> float:
  """Eq. (1): the noise multiplier of one sample's Gaussian sum queries.

  ``sum_queries`` holds ``{"l2_norm_clip", "noise_stddev"}`` dicts or
  ``(l2_norm_clip, noise_stddev)`` pairs; the result is
  ``allocation.effective_noise_multiplier`` of their clips and stddevs:
  ``inf`` if nothing private was released (no queries, or all clips 0 or
  all noise infinite), ``0`` if some query released a non-zero clip
  without noise.
  """
  pairs = [ledger_schema.check_query(q, f"sum_queries[{i}]")
           if isinstance(q, dict) else tuple(q)
           for i, q in enumerate(sum_queries)]
  return allocation.effective_noise_multiplier([c for c, _ in pairs],
                                               [s for _, s in pairs])


_SHUFFLED_WARNING = (
    "The ledger records 'shuffled' sampling (batches of a shuffled pass, as "
    "Keras fit(shuffle=True) draws them). It is accounted like fixed-size "
    "sampling without replacement: the conventional approximation, not a "
    "proven guarantee (Chua et al. 2024, 'How Private are DP-SGD "
    "Implementations?'). For a guarantee, feed the model from tf_dp.data's "
    "Poisson or fixed-size samplers.")

# The ledger objects whose "shuffled" samples were warned about: one
# warning per ledger (per run), whichever accounting comes first (an
# epoch's epsilon, a PrivacyBudget's plan, the user's call). Weakly held.
_WARNED_LEDGERS: "weakref.WeakSet[Any]" = weakref.WeakSet()


def _warn_shuffled_once(ledger: LedgerLike, stacklevel: int) -> None:
  """Warns that "shuffled" samples are accounted by an approximation: once
  per ledger object, and for every export (a dict or JSON text, which
  carries no identity: each may be another run's). ``stacklevel`` is
  ``warnings.warn``'s, counted from this function's caller."""
  if hasattr(ledger, "to_dict"):
    if ledger in _WARNED_LEDGERS:
      return
    _WARNED_LEDGERS.add(ledger)
  warnings.warn(_SHUFFLED_WARNING, UserWarning, stacklevel=stacklevel + 1)


def ledger_event_runs(ledger: LedgerLike,
                      warn_shuffled: bool = True
                      ) -> List[Tuple[LedgerEvent, int]]:
  """``(LedgerEvent, count)`` pairs: runs of identical consecutive samples.

  An accountant composes each event ``count`` times at once; a 10^6-step
  run with constant hyperparameters is one pair. Samples whose sum
  queries reduce to the same noise multiplier (eq. (1)) share a run.
  Warns (``UserWarning``) if any sample is ``"shuffled"``: once per ledger
  object (the first accounting of a run: ``fit``'s epsilon, a
  ``PrivacyBudget``'s plan or the user's call), at every call for an
  export; never with ``warn_shuffled=False``.

  Raises:
    PrivacyError: if the samples do not all have one privacy unit (a
      per-example sample says nothing about a user's examples together,
      and a per-user epsilon cannot be composed from it).
    LedgerFormatError: if a sample other than a fixed-order pass's closing
      one records no sum query (a correlated-noise run's samples without
      its record: part of a ledger).
  """
  return _event_runs(_export(ledger), ledger if warn_shuffled else None,
                     stacklevel=3)


def _event_runs(export: Any, warn_about: Optional[LedgerLike],
                stacklevel: int) -> List[Tuple[LedgerEvent, int]]:
  """``ledger_event_runs`` of an export; warns about ``warn_about`` (the
  ledger as given, or None: no warning) at ``warnings.warn``'s
  ``stacklevel`` counted from this function's caller."""
  out: List[Tuple[LedgerEvent, int]] = []
  runs = ledger_runs(export)
  _privacy_unit_of_runs(runs)
  # A fixed-order sample without queries closes a pass and released
  # nothing (tf_dp.analysis.fixed_order); a correlated-noise run, whose
  # samples record no query, takes "shuffled" batches only.
  if any(not sample.sum_queries and sample.sampling != Sampling.FIXED_ORDER
         for sample, _ in runs):
    raise LedgerFormatError(
        "A sample of this ledger records no sum query: only a "
        "correlated-noise run (DPOptimizer(..., noise_strategy=...)) "
        "records such samples, and its record ('correlated_noise', which "
        "its epsilon is computed from) is missing from this export. Read "
        "the whole ledger: ledger.to_dict() or to_json() of the optimizer's "
        "ledger, or tf_dp.estimator.ledger_from_checkpoint of its file.")
  for sample, count in runs:
    event = LedgerEvent(sample.sampling, sample.sampling_probability,
                        sample_noise_multiplier(sample.sum_queries),
                        sample.population_size, sample.examples_per_record,
                        sample.privacy_unit)
    if out and out[-1][0] == event:
      out[-1] = (event, out[-1][1] + count)
    else:
      out.append((event, count))
  if warn_about is not None and any(e.sampling == Sampling.SHUFFLED
                                    for e, _ in out):
    _warn_shuffled_once(warn_about, stacklevel + 1)
  return out


def ledger_events(ledger: LedgerLike) -> List[LedgerEvent]:
  """One ``LedgerEvent`` per recorded sample (plain Python values).

  Expands the runs of ``ledger_event_runs`` (which warns on ``"shuffled"``
  sampling); prefer that function for long ledgers.
  """
  return [e for e, count in ledger_event_runs(ledger) for _ in range(count)]


def compute_rdp_from_ledger(
    ledger: LedgerLike, orders: Optional[checks.FloatArray] = None
) -> np.ndarray:
  """RDP (per order) of everything recorded in ``ledger``.

  Privacy contract: Poisson samples are accounted as the Poisson-subsampled
  Gaussian (add/remove one record); fixed-size samples as sampling without
  replacement (replace one record, sensitivity 2C); fixed-order samples as
  passes, each an unsampled Gaussian mechanism of sensitivity 2C
  (``fixed_order``). Samples that released nothing cost nothing; a sample
  with a non-zero clip and zero noise makes the RDP infinite. A Poisson ledger whose records are microbatches is
  refused: Poisson sampling of examples does not sample microbatches.
  Runs of identical samples are composed at once; above
  ``event_accounting.RDP_MAX_DISTINCT_EVENTS`` distinct samples, noise
  multipliers are rounded down to a fine grid (pessimistic).
  """
  return event_accounting.rdp_of_runs(ledger_event_runs(ledger), orders)


def compute_epsilon_from_ledger(
    ledger: LedgerLike, delta: float,
    orders: Optional[checks.FloatArray] = None,
    conversion: Optional[str] = None, accountant: Optional[str] = None
) -> Tuple[float, float]:
  """(epsilon, optimal_order) of everything recorded in ``ledger``.

  Privacy contract: as ``compute_rdp_from_ledger``; the epsilon is an upper
  bound at ``delta`` for the composition of all recorded samples. A ledger
  of a correlated-noise run (``DPOptimizer(..., noise_strategy=...)``) is
  accounted from its correlated record alone
  (``correlated_noise_accounting.correlated_noise_epsilon``: the strategy's
  sensitivity for the participation run, never sampling), and refused if
  it left the strategy's promise.

  Args:
    ledger: A ``PrivacyLedger``, its ``to_dict()`` export or that as JSON.
    delta: Target delta, in (0, 1).
    orders: RDP only: Renyi orders (the package default if None).
    conversion: RDP only: ``"tight"`` (default) or ``"classic"``.
    accountant: ``"pld"`` (privacy loss distributions, the tightest) or
      ``"rdp"``; None means ``"pld"`` unless ``orders`` or ``conversion``
      is given.

  Returns:
    ``(epsilon, optimal_order)``; the order is ``nan`` for PLD.

  Example:
    >>> eps, _ = compute_epsilon_from_ledger(optimizer.ledger, 1e-5)
  """
  export = _export(ledger)
  if isinstance(export, dict) and ledger_schema.CORRELATED_NOISE_KEY in export:
    return _correlated_noise_epsilon(export, delta), math.nan
  return event_accounting.epsilon_of_runs(
      _event_runs(export, ledger, stacklevel=2), delta, orders=orders,
      conversion=conversion, accountant=accountant)


def _correlated_noise_epsilon(export, delta):
  """Epsilon of a ledger whose samples are one correlated-noise run: its
  record's (``correlated_noise_accounting``), after checking that no
  sample also released an independent Gaussian query."""
  export = dict(export)
  record = export.pop(ledger_schema.CORRELATED_NOISE_KEY)
  for sample, _ in ledger_runs(export):
    if sample.sum_queries:
      raise LedgerFormatError(
          "A ledger with a correlated-noise record holds samples with "
          "Gaussian sum queries as well: their composition is not "
          "accounted.")
  return correlated_noise_accounting.correlated_noise_epsilon(record, delta)


def _privacy_unit_of_runs(runs):
  units = sorted({str(sample.privacy_unit) for sample, _ in runs})
  if len(units) > 1:
    raise PrivacyError(
        f"The ledger mixes samples of privacy units {units}: epsilon is per "
        f"one unit. Train each unit with its own optimizer and ledger (a "
        f"per-user run needs lots of tf_dp.data.poisson_sampled_users from "
        f"its first step).")
  return PrivacyUnit(units[0] if units else PrivacyUnit.EXAMPLE)


def ledger_privacy_unit(ledger: LedgerLike) -> PrivacyUnit:
  """The privacy unit of every sample of ``ledger`` (``"example"`` for an
  empty ledger), also of a correlated-noise run's.

  Raises:
    PrivacyError: if its samples mix units.
  """
  export = _export(ledger)
  if isinstance(export, dict) and ledger_schema.CORRELATED_NOISE_KEY in export:
    export = dict(export)
    del export[ledger_schema.CORRELATED_NOISE_KEY]
  return _privacy_unit_of_runs(ledger_runs(export))


def epsilon_statement(epsilon: float, delta: float,
                      privacy_unit: str = PrivacyUnit.EXAMPLE) -> str:
  """``(epsilon, delta)`` as one sentence that names what it protects.

  Args:
    epsilon: A number (e.g. ``compute_epsilon_from_ledger(ledger,
      delta)[0]``), not a ledger.
    delta: The delta that epsilon holds at.
    privacy_unit: ``"example"`` or ``"user"``
      (``ledger_privacy_unit(ledger)``).

  Raises:
    TypeError: epsilon or delta is not a number, with the call to make.

  Example:
    >>> epsilon_statement(1.25, 1e-5, "user")[:40]
    '(epsilon = 1.25, delta = 1e-05)-DP per u'
  """
  for name, value in (("epsilon", epsilon), ("delta", delta)):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
      raise TypeError(
          f"epsilon_statement(epsilon, delta, privacy_unit) takes {name} as "
          f"a number; got {type(value).__name__}. For a ledger: eps = "
          f"compute_epsilon_from_ledger(ledger, delta)[0]; then "
          f"epsilon_statement(eps, delta, ledger_privacy_unit(ledger)).")
  unit = PrivacyUnit.check("privacy_unit", privacy_unit)
  whom = ("one user (all their examples)" if unit is PrivacyUnit.USER
          else "one example")
  return (f"(epsilon = {epsilon:.4g}, delta = {delta:g})-DP per {unit}: "
          f"adding or removing (or, for fixed-size lots, replacing) {whom} "
          f"changes the probability of any outcome of training by at most a "
          f"factor e^epsilon, except with probability delta.")


def to_dp_accounting_events(ledger: LedgerLike) -> List[Any]:
  """The ledger as ``dp_accounting`` events (needs the optional package).

  One event per run of identical samples: a ``PoissonSampledDpEvent``
  (add/remove neighbours) or, for ``"fixed_size"`` and ``"shuffled"``
  samples, a ``SampledWithoutReplacementDpEvent`` whose Gaussian noise
  multiplier is taken relative to the replace-one sensitivity 2C (hence
  z / 2); ``"fixed_order"`` samples as one ``GaussianDpEvent(z / 2)`` per
  pass (``fixed_order.pass_runs``); a run of k > 1 samples (or passes) is
  wrapped in ``SelfComposedDpEvent(e, k)``. Samples that released nothing
  are left out.
  """
  import dp_accounting  # pylint: disable=g-import-not-at-top
  out = []
  for e, count in fixed_order.pass_runs(ledger_event_runs(ledger)):
    if math.isinf(e.noise_multiplier) or count == 0:
      continue
    if e.sampling == Sampling.POISSON:
      event = dp_accounting.PoissonSampledDpEvent(
          e.sampling_probability,
          dp_accounting.GaussianDpEvent(e.noise_multiplier))
    elif e.sampling_probability == 1:  # A pass, or a lot of every record.
      event = dp_accounting.GaussianDpEvent(e.noise_multiplier / 2)
    else:
      batch = int(round(e.sampling_probability * e.population_size))
      event = dp_accounting.SampledWithoutReplacementDpEvent(
          e.population_size, batch,
          dp_accounting.GaussianDpEvent(e.noise_multiplier / 2))
    out.append(event if count == 1
               else dp_accounting.SelfComposedDpEvent(event, count))
  return out
