"""The privacy ledger's plain-data format: the one definition (no TensorFlow).

A ledger export is a JSON object. Two versions exist; both are read:

* ``"tf_dp.privacy_ledger/1"``: ``{"format", "dropped_samples", "samples"}``
  with one entry per recorded sample (a lot / training step).
* ``"tf_dp.privacy_ledger/2"`` (what ``PrivacyLedger.to_json`` writes):
  ``{"format", "dropped_samples", "runs"}``, where each run is a sample
  entry plus ``"count"``: that many identical consecutive samples. A
  10^6-step run with constant hyperparameters is one run (~0.3 kB) instead
  of ~10^6 entries (~200 MB).

A sample entry has these keys (``SAMPLE_KEYS``; all but ``sum_queries``
are the sampling event, ``SAMPLING_EVENT_KEYS``), ``privacy_unit`` optional:

* ``population_size``: integer n >= 1, the number of privacy units
  (examples, or users when ``privacy_unit`` is ``"user"``);
* ``sampling_probability``: q in [0, 1], the probability that a unit is
  in the sample (Poisson), or the sample size / n (fixed-size, shuffled);
* ``sampling``: a ``tf_dp.sampling.Sampling`` value, ``"poisson"``,
  ``"fixed_size"`` or ``"shuffled"`` (what each means, and how
  ``"shuffled"`` is accounted, is said there);
* ``examples_per_record``: integer >= 1 (the microbatch size, or 1);
* ``sum_queries``: list of ``{"l2_norm_clip", "noise_stddev"}``, reals >= 0;
* ``privacy_unit``: a ``tf_dp.sampling.PrivacyUnit`` value, ``"example"``
  or ``"user"``: what one record is, and what epsilon protects. Written
  only for ``"user"``; an entry without it is ``"example"`` (every ledger
  written before the unit existed). A reader that does not know the key
  refuses the entry rather than account a user-level ledger per example.

Every field is validated on reading; a bad field raises
``tf_dp.errors.LedgerFormatError`` (a ``ValueError``)
naming its path (``runs[3].sampling``), the value and the allowed values.
Unknown keys are refused too: a newer writer may give them a meaning that
changes the privacy accounting.
"""

import collections
import math
import numbers
from typing import (Any, Dict, Iterable, List, NamedTuple, Sequence, Tuple,
                    Union)

import numpy as np

from tf_dp.analysis import checks
from tf_dp.errors import LedgerFormatError
from tf_dp.errors import PrivacyError
from tf_dp.sampling import PrivacyUnit
from tf_dp.sampling import Sampling

FORMAT_V1 = "tf_dp.privacy_ledger/1"
FORMAT_V2 = "tf_dp.privacy_ledger/2"
CURRENT_FORMAT = FORMAT_V2
READABLE_FORMATS = (FORMAT_V1, FORMAT_V2)
_FORMAT_PREFIX = "tf_dp.privacy_ledger/"

# The buffer code of a kind is its index here (the enum's order), plus
# UNIT_CODE_STRIDE times the index of the privacy unit: codes 0-2 (every
# buffer and checkpoint written before the unit existed) are per example.
_KINDS = tuple(Sampling)
_UNITS = tuple(PrivacyUnit)
UNIT_CODE_STRIDE = 16


class SamplingEvent(NamedTuple):
  """How one sample was drawn (fields may be tensors inside a TF graph;
  ``sampling`` and ``privacy_unit`` are Python strings)."""
  population_size: Any
  sampling_probability: Any
  sampling: str
  examples_per_record: Any
  privacy_unit: str = PrivacyUnit.EXAMPLE


class Sample(NamedTuple):
  """One recorded sample, hashable: ``sum_queries`` is a tuple of
  ``(l2_norm_clip, noise_stddev)`` float pairs."""
  population_size: int
  sampling_probability: float
  sampling: str
  examples_per_record: int
  sum_queries: Tuple[Tuple[float, float], ...]
  privacy_unit: str = PrivacyUnit.EXAMPLE


class Run(NamedTuple):
  """``count`` identical consecutive samples."""
  sample: Sample
  count: int  # type: ignore[assignment]  # (shadows tuple.count)


SAMPLING_EVENT_KEYS = SamplingEvent._fields
SAMPLE_KEYS = Sample._fields
# Keys a sample entry may leave out, with the value their absence means.
OPTIONAL_SAMPLE_KEYS = {"privacy_unit": PrivacyUnit.EXAMPLE}
QUERY_KEYS = ("l2_norm_clip", "noise_stddev")


def _int_at_least(where, value, low):
  """An integer >= low (0 or 1); JSON-integral floats such as 6e4 pass."""
  check = checks.check_positive_int if low == 1 else checks.check_steps
  return check(where, value, integral_float=True)


def _real(where, value, low, high):
  return checks.check_real(where, value, low=low, high=high)


def sampling_code(kind: str, privacy_unit: str = PrivacyUnit.EXAMPLE) -> int:
  """The buffer code of a sampling kind and privacy unit: the kind's index
  in ``Sampling`` plus ``UNIT_CODE_STRIDE`` times the unit's index in
  ``PrivacyUnit`` (per-example codes are the kinds' indices).

  ``kind`` and ``privacy_unit`` are Python values (static in a TF graph).
  """
  unit = PrivacyUnit.check("privacy_unit", privacy_unit)
  return (_KINDS.index(Sampling.check("sampling", kind))
          + UNIT_CODE_STRIDE * _UNITS.index(unit))


def _decode_code(code, where):
  value = (float(code) if isinstance(code, numbers.Real)
           and not isinstance(code, bool) else math.nan)
  kind, unit = (divmod(int(value), UNIT_CODE_STRIDE)[::-1]
                if value == value and value == int(value) and value >= 0
                else (-1, -1))
  if not (0 <= kind < len(_KINDS) and 0 <= unit < len(_UNITS)):
    raise LedgerFormatError(
        f"{where} must be an index into {_KINDS} plus {UNIT_CODE_STRIDE} "
        f"times an index into {_UNITS}; got {code!r}.")
  return _KINDS[kind], _UNITS[unit]


def sampling_kind(code: Any, where: str = "sampling code") -> Sampling:
  """The sampling kind of a buffer code (a float or int)."""
  return _decode_code(code, where)[0]


def privacy_unit(code: Any, where: str = "sampling code") -> PrivacyUnit:
  """The privacy unit of a buffer code (a float or int)."""
  return _decode_code(code, where)[1]


def check_query(raw: Any, where: str) -> Tuple[float, float]:
  """One sum query as a validated ``(l2_norm_clip, noise_stddev)`` pair."""
  if not isinstance(raw, dict):
    raise ValueError(f"{where} must be a dict with keys {QUERY_KEYS}; got "
                     f"{raw!r}.")
  unknown = sorted(set(raw) - set(QUERY_KEYS))
  missing = [k for k in QUERY_KEYS if k not in raw]
  if unknown or missing:
    raise ValueError(f"{where} must have exactly the keys {QUERY_KEYS}; "
                     f"missing {missing}, unknown {unknown}.")
  return (_real(f"{where}.l2_norm_clip", raw["l2_norm_clip"], 0, math.inf),
          _real(f"{where}.noise_stddev", raw["noise_stddev"], 0, math.inf))


def check_sample(raw: Any, where: str,
                 extra_keys: Iterable[str] = ()) -> Sample:
  """One sample entry as a validated ``Sample`` (see the module docstring).

  ``extra_keys`` are allowed and ignored (``"count"`` in runs); an
  ``OPTIONAL_SAMPLE_KEYS`` key left out takes its default.
  """
  if not isinstance(raw, dict):
    raise ValueError(f"{where} must be a dict with keys {SAMPLE_KEYS}; got "
                     f"{raw!r}.")
  unknown = sorted(set(raw) - set(SAMPLE_KEYS) - set(extra_keys))
  missing = [k for k in SAMPLE_KEYS
             if k not in raw and k not in OPTIONAL_SAMPLE_KEYS]
  if unknown or missing:
    raise ValueError(f"{where} must have the keys {SAMPLE_KEYS}; missing "
                     f"{missing}, unknown {unknown}.")
  queries = raw["sum_queries"]
  if not isinstance(queries, (list, tuple)):
    raise ValueError(f"{where}.sum_queries must be a list; got {queries!r}.")
  return Sample(
      _int_at_least(f"{where}.population_size", raw["population_size"], 1),
      checks.check_probability(f"{where}.sampling_probability",
                               raw["sampling_probability"]),
      Sampling.check(f"{where}.sampling", raw["sampling"]),
      _int_at_least(f"{where}.examples_per_record",
                    raw["examples_per_record"], 1),
      tuple(check_query(q, f"{where}.sum_queries[{j}]")
            for j, q in enumerate(queries)),
      PrivacyUnit.check(f"{where}.privacy_unit",
                        raw.get("privacy_unit", PrivacyUnit.EXAMPLE)))


def merge_runs(runs: Iterable[Run]) -> List[Run]:
  """Merges consecutive runs of equal samples (counts add)."""
  out: List[Run] = []
  for run in runs:
    if out and out[-1].sample == run.sample:
      out[-1] = Run(run.sample, out[-1].count + run.count)
    else:
      out.append(run)
  return out


def _runs_from_v1_entries(entries):
  """Runs of version-1 entries; an entry equal to the previous raw entry
  (a fast dict comparison) is not validated again."""
  runs: List[Run] = []
  previous = None
  for i, raw in enumerate(entries):
    if runs and isinstance(raw, dict) and raw == previous:
      runs[-1] = Run(runs[-1].sample, runs[-1].count + 1)
      continue
    sample = check_sample(raw, f"samples[{i}]")
    previous = raw
    if runs and runs[-1].sample == sample:
      runs[-1] = Run(sample, runs[-1].count + 1)
    else:
      runs.append(Run(sample, 1))
  return runs


def _check_format(data):
  if not isinstance(data, dict):
    raise ValueError("A ledger export must be a dict (or its JSON) with a "
                     f"'format' key; got {type(data).__name__}.")
  fmt = data.get("format")
  if fmt in READABLE_FORMATS:
    return fmt
  if isinstance(fmt, str) and fmt.startswith(_FORMAT_PREFIX):
    raise ValueError(f"format {fmt!r} was written by a newer tf_dp (this one "
                     f"reads {READABLE_FORMATS}); upgrade tf_dp to read it.")
  raise ValueError(f"Not a tf_dp ledger export: format must be one of "
                   f"{READABLE_FORMATS}; got {fmt!r}.")


# The key of a correlated-noise run's record in a ledger export
# (``correlated_noise_accounting``); ``decode`` refuses it.
CORRELATED_NOISE_KEY = "correlated_noise"


def decode(data: Any) -> Tuple[List[Run], int]:
  """Validates a ledger export (version 1 or 2) and returns its runs.

  Args:
    data: The export as a dict (``json.loads`` of the file).

  Returns:
    ``(runs, dropped_samples)``: a list of ``Run`` (consecutive equal
    samples merged) and the number of samples the ledger could not record.

  Raises:
    LedgerFormatError: naming the first invalid field, its value and the
      fix.
  """
  try:
    return _decode(data)
  except LedgerFormatError:
    raise
  except ValueError as e:  # A field check of tf_dp.analysis.checks.
    raise LedgerFormatError(str(e)) from None


def _decode(data):
  fmt = _check_format(data)
  if isinstance(data, dict) and CORRELATED_NOISE_KEY in data:
    raise PrivacyError(
        "This ledger records a correlated-noise run (DPOptimizer(..., "
        "noise_strategy=...)): its samples are not independent Gaussian "
        "queries and only tf_dp.analysis.compute_epsilon_from_ledger "
        "accounts it (from the strategy's sensitivity).")
  key = "samples" if fmt == FORMAT_V1 else "runs"
  top = {"format", "dropped_samples", key}
  unknown = sorted(set(data) - top)
  if unknown or key not in data:
    raise ValueError(f"A {fmt} ledger has the keys {sorted(top)}; missing "
                     f"{[k for k in (key,) if k not in data]}, unknown "
                     f"{unknown}.")
  dropped = _int_at_least("dropped_samples", data.get("dropped_samples", 0),
                          0)
  entries = data[key]
  if not isinstance(entries, list):
    raise ValueError(f"{key} must be a list; got {type(entries).__name__}.")
  if fmt == FORMAT_V1:
    runs = _runs_from_v1_entries(entries)
  else:
    runs = merge_runs([
        Run(check_sample(r, f"runs[{i}]", extra_keys=("count",)),
            _int_at_least(f"runs[{i}].count", r.get("count"), 1))
        for i, r in enumerate(entries)])
  return runs, dropped


def sample_to_dict(sample: Sample) -> Dict[str, Any]:
  """A ``Sample`` as a (fresh) JSON-ready dict (``privacy_unit`` only when
  it is not ``"example"``)."""
  entry = dict(sample._asdict())
  entry["sum_queries"] = [dict(zip(QUERY_KEYS, q))
                          for q in sample.sum_queries]
  for key, default in OPTIONAL_SAMPLE_KEYS.items():
    if entry[key] == default:
      del entry[key]
    else:
      entry[key] = str(entry[key])
  return entry


def encode(runs: Sequence[Run], dropped_samples: int,
           ledger_format: str = CURRENT_FORMAT) -> Dict[str, Any]:
  """The export dict of ``runs`` in ``ledger_format`` (1: one entry each)."""
  if ledger_format == FORMAT_V1:
    samples = [sample_to_dict(r.sample) for r in runs for _ in range(r.count)]
    return {"format": FORMAT_V1, "dropped_samples": int(dropped_samples),
            "samples": samples}
  if ledger_format == FORMAT_V2:
    runs_out = []
    for r in merge_runs(runs):
      entry = sample_to_dict(r.sample)
      entry["count"] = int(r.count)
      runs_out.append(entry)
    return {"format": FORMAT_V2, "dropped_samples": int(dropped_samples),
            "runs": runs_out}
  raise ValueError(f"ledger_format must be one of {READABLE_FORMATS}; got "
                   f"{ledger_format!r}.")


def total_samples(runs: Iterable[Run]) -> int:
  """The number of samples (steps) in ``runs``."""
  return sum(r.count for r in runs)


# --- The PrivacyLedger buffer layout (also what checkpoints hold). ---
# One row per sample and one row per sum query, float64 columns:
SAMPLE_ROW = ("population_size", "sampling_probability", "sampling_code",
              "examples_per_record")
QUERY_ROW = ("sample_index",) + QUERY_KEYS


def sample_row(event: Union[SamplingEvent, Sample]) -> List[Any]:
  """The buffer row of a ``SamplingEvent`` (or ``Sample``): its fields in
  ``SAMPLE_ROW`` order, the sampling and privacy unit as their code. Works
  on tensors too."""
  values = dict(event._asdict(), sampling_code=sampling_code(
      event.sampling, event.privacy_unit))
  return [values[k] for k in SAMPLE_ROW]


def _sample_boundaries(rows, qrows, idx, counts):
  """True where sample i differs from sample i - 1 (vectorised)."""
  n = len(rows)
  differs = np.ones(n, dtype=bool)
  differs[1:] = (np.any(rows[1:] != rows[:-1], axis=1)
                 | (counts[1:] != counts[:-1]))
  if len(idx):
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    pos = np.arange(len(idx)) - starts[idx]
    prev = np.maximum(idx - 1, 0)
    comparable = (idx >= 1) & (counts[idx] == counts[prev])
    partner = np.where(comparable, starts[prev] + pos, 0)
    mismatch = ~comparable | np.any(qrows[:, 1:] != qrows[partner, 1:], axis=1)
    differs |= np.bincount(idx, weights=mismatch, minlength=n) > 0
  return differs


def runs_from_buffers(samples: Any, queries: Any, n_samples: int,
                      n_queries: int) -> List[Run]:
  """The ``Run`` list recorded in PrivacyLedger buffers (numpy arrays).

  Consecutive identical samples are found with vectorised comparisons, so
  a 10^6-sample buffer becomes its runs without 10^6 Python dicts.
  """
  rows = np.asarray(samples, dtype=float)[:n_samples].reshape(
      -1, len(SAMPLE_ROW))
  qrows = np.asarray(queries, dtype=float)[:n_queries].reshape(
      -1, len(QUERY_ROW))
  idx = qrows[:, 0].astype(int)
  if np.any(idx < 0) or np.any(idx >= len(rows)):
    raise LedgerFormatError(
        "ledger buffers are corrupt: a sum query refers to sample "
        f"{int(idx[(idx < 0) | (idx >= len(rows))][0])} of {len(rows)}.")
  if np.any(np.diff(idx) < 0):  # Written in order; sort only if not.
    order = np.argsort(idx, kind="stable")
    qrows, idx = qrows[order], idx[order]
  counts = np.bincount(idx, minlength=len(rows))
  starts = np.concatenate([[0], np.cumsum(counts)]).astype(int)
  first = np.flatnonzero(_sample_boundaries(rows, qrows, idx, counts))
  ends = np.append(first[1:], len(rows))
  runs: List[Run] = []
  for i, end in zip(first, ends):
    row = dict(zip(SAMPLE_ROW, rows[i]))
    kind, unit = _decode_code(row["sampling_code"], f"samples[{i}] code")
    sample = Sample(
        population_size=int(round(row["population_size"])),
        sampling_probability=float(row["sampling_probability"]),
        sampling=kind,
        examples_per_record=int(round(row["examples_per_record"])),
        sum_queries=tuple((float(c), float(s))
                          for _, c, s in qrows[starts[i]:starts[i + 1]]),
        privacy_unit=unit)
    runs.append(Run(sample, int(end - i)))
  return runs


def buffers_from_runs(runs: Sequence[Run]) -> Tuple[np.ndarray, np.ndarray]:
  """``(sample_rows, query_rows)`` arrays that record ``runs`` in order."""
  counts = np.array([r.count for r in runs], dtype=int)
  rows = np.array([sample_row(r.sample) for r in runs],
                  dtype=float).reshape(-1, len(SAMPLE_ROW))
  sample_rows = np.repeat(rows, counts, axis=0)
  per_run = np.array([len(r.sample.sum_queries) for r in runs], dtype=int)
  values = np.array([q for r in runs for q in r.sample.sum_queries],
                    dtype=float).reshape(-1, len(QUERY_KEYS))
  run_start = np.concatenate([[0], np.cumsum(per_run)[:-1]]).astype(int)
  run_of_sample = np.repeat(np.arange(len(runs)), counts)
  per_sample = per_run[run_of_sample]
  sample_of_query = np.repeat(np.arange(len(sample_rows)), per_sample)
  first_query = np.concatenate([[0], np.cumsum(per_sample)[:-1]]).astype(int)
  pos = np.arange(len(sample_of_query)) - first_query[sample_of_query]
  source = run_start[run_of_sample[sample_of_query]] + pos
  query_rows = np.column_stack([sample_of_query.astype(float),
                                values[source].reshape(-1, len(QUERY_KEYS))])
  return sample_rows, query_rows.reshape(-1, len(QUERY_ROW))
