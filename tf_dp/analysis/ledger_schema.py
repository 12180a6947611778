"""The privacy ledger's plain-data format: the one definition (no TensorFlow).

A ledger export is a JSON object. Two versions exist; both are read:

* ``"tf_dp.privacy_ledger/1"``: ``{"format", "dropped_samples", "samples"}``
  with one entry per recorded sample (a lot / training step).
* ``"tf_dp.privacy_ledger/2"`` (what ``PrivacyLedger.to_json`` writes):
  ``{"format", "dropped_samples", "runs"}``, where each run is a sample
  entry plus ``"count"``: that many identical consecutive samples. A
  10^6-step run with constant hyperparameters is one run (~0.3 kB) instead
  of ~10^6 entries (~200 MB).

A sample entry's keys, and what each may hold, are the table
``SAMPLE_FIELDS`` (a run's, ``RUN_FIELDS``: the same plus ``"count"``);
``privacy_unit`` may be left out (``"example"``). Every field is validated
on reading: a bad field raises ``tf_dp.errors.LedgerFormatError`` (a
``ValueError``) naming its path (``runs[3].sampling``), the value and the
allowed values. Unknown keys are refused too: a newer writer may give them
a meaning that changes the privacy accounting (an older reader refuses a
user-level entry rather than account it per example). ``read_object``
reads a JSON object from such a table (the correlated-noise record's too).
"""

import functools
import math
import numbers
from types import MappingProxyType
from typing import (Any, Callable, Dict, Iterable, List, Mapping, NamedTuple,
                    Sequence, Tuple, Union)

import numpy as np

from tf_dp.analysis import checks
from tf_dp.errors import LedgerFormatError
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


# Keys a sample entry may leave out, with the value their absence means.
OPTIONAL_SAMPLE_KEYS = {"privacy_unit": PrivacyUnit.EXAMPLE}
QUERY_KEYS = ("l2_norm_clip", "noise_stddev")
# The key of a correlated-noise run's record in a ledger export
# (``correlated_noise_accounting``); ``decode`` refuses it.
CORRELATED_NOISE_KEY = "correlated_noise"


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


# --- Reading an export: a table of keys and field checks per JSON object.

# A field check: (path, value) -> the typed value; a bad value raises a
# ValueError naming the path.
FieldCheck = Callable[[str, Any], Any]


def int_at_least(low: int) -> FieldCheck:
  """An integer >= low (0 or 1); JSON-integral floats such as 6e4 pass."""
  check = checks.check_positive_int if low == 1 else checks.check_steps
  return functools.partial(check, integral_float=True)


_real_at_least_0 = functools.partial(checks.check_real, low=0)


def read_list(where: str, value: Any) -> Sequence[Any]:
  """``value`` if it is a list (or tuple)."""
  if not isinstance(value, (list, tuple)):
    raise LedgerFormatError(
        f"{where} must be a list; got {type(value).__name__}.")
  return value


def read_object(where: str, raw: Any, fields: Mapping[str, FieldCheck],
                optional: Mapping[str, Any] = MappingProxyType({}),
                label: str = "") -> Dict[str, Any]:
  """The fields of the JSON object ``raw``, each checked by its entry of
  ``fields`` at the path ``where.key``; a key of ``optional`` may be left
  out (it takes that value), any other key is refused. ``label`` names
  ``raw`` in messages (default ``where``).

  Raises:
    LedgerFormatError: if ``raw`` is not a dict, has another set of keys or
      a field its check refuses (the message names the field's path).
  """
  if not (isinstance(raw, dict) and raw.keys() <= fields.keys() and (
      len(raw) == len(fields) or all(k in raw or k in optional
                                     for k in fields))):
    required = tuple(k for k in fields if k not in optional)
    keys = f"exactly the keys {required}" + (
        f" (and optionally {tuple(optional)})" if optional else "")
    label = label or where
    if not isinstance(raw, dict):
      raise LedgerFormatError(f"{label} must be a dict with {keys}; got "
                              f"{raw!r}.")
    raise LedgerFormatError(
        f"{label} must have {keys}; missing "
        f"{[k for k in required if k not in raw]}, unknown "
        f"{sorted(set(raw) - set(fields))}.")
  prefix = f"{where}." if where else ""
  try:
    return {key: check(prefix + key, raw[key] if key in raw else optional[key])
            for key, check in fields.items()}
  except LedgerFormatError:
    raise
  except ValueError as e:  # A check of tf_dp.analysis.checks.
    raise LedgerFormatError(str(e)) from None


QUERY_FIELDS: Dict[str, FieldCheck] = {
    "l2_norm_clip": _real_at_least_0, "noise_stddev": _real_at_least_0}


def check_query(raw: Any, where: str) -> Tuple[float, float]:
  """One sum query as a validated ``(l2_norm_clip, noise_stddev)`` pair."""
  query = read_object(where, raw, QUERY_FIELDS)
  return query["l2_norm_clip"], query["noise_stddev"]


# A sample entry, one check per key (the fields of ``Sample``; all but
# ``sum_queries`` are those of ``SamplingEvent``).
SAMPLE_FIELDS: Dict[str, FieldCheck] = {
    # n: the number of privacy units (examples, or users).
    "population_size": int_at_least(1),
    # q: the probability that a unit is in the sample (Poisson), or the
    # sample size / n (fixed-size, shuffled).
    "sampling_probability": checks.check_probability,
    # What each kind means, and how "shuffled" is accounted: Sampling.
    "sampling": Sampling.check,
    # The microbatch size, or 1.
    "examples_per_record": int_at_least(1),
    # (l2_norm_clip, noise_stddev) of each Gaussian sum query released.
    "sum_queries": lambda where, value: tuple(
        check_query(q, f"{where}[{j}]")
        for j, q in enumerate(read_list(where, value))),
    # What one record is and what epsilon protects; written for "user" only.
    "privacy_unit": PrivacyUnit.check,
}
RUN_FIELDS = dict(SAMPLE_FIELDS, count=int_at_least(1))


def _read_runs(where: str, entries: Any,
               fields: Mapping[str, FieldCheck]) -> List[Run]:
  """The runs of a list of sample entries (count 1 each) or run entries,
  consecutive equal samples merged. An entry equal to the one before it is
  not checked again (a fast dict comparison: a 10^6-entry version-1 export
  reads in seconds)."""
  runs: List[Run] = []
  previous, count = None, 0
  for i, raw in enumerate(read_list(where, entries)):
    if runs and raw == previous:
      runs[-1] = Run(runs[-1].sample, runs[-1].count + count)
      continue
    values = read_object(f"{where}[{i}]", raw, fields, OPTIONAL_SAMPLE_KEYS)
    count = values.pop("count", 1)
    sample, previous = Sample(**values), raw
    if runs and runs[-1].sample == sample:
      runs[-1] = Run(sample, runs[-1].count + count)
    else:
      runs.append(Run(sample, count))
  return runs


def _check_format(data):
  if not isinstance(data, dict):
    raise LedgerFormatError("A ledger export must be a dict (or its JSON) "
                            f"with a 'format' key; got {type(data).__name__}.")
  fmt = data.get("format")
  if fmt in READABLE_FORMATS:
    return fmt
  if isinstance(fmt, str) and fmt.startswith(_FORMAT_PREFIX):
    raise LedgerFormatError(
        f"format {fmt!r} was written by a newer tf_dp (this one reads "
        f"{READABLE_FORMATS}); upgrade tf_dp to read it.")
  raise LedgerFormatError(f"Not a tf_dp ledger export: format must be one of "
                          f"{READABLE_FORMATS}; got {fmt!r}.")


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
  fmt = _check_format(data)
  if CORRELATED_NOISE_KEY in data:
    raise LedgerFormatError(
        "This ledger records a correlated-noise run (DPOptimizer(..., "
        "noise_strategy=...)): its samples are not independent Gaussian "
        "queries and only tf_dp.analysis.compute_epsilon_from_ledger "
        "accounts it (from the strategy's sensitivity).")
  key, fields = (("samples", SAMPLE_FIELDS) if fmt == FORMAT_V1
                 else ("runs", RUN_FIELDS))
  top = {"format": lambda where, value: value,
         "dropped_samples": int_at_least(0),
         key: lambda where, value: _read_runs(where, value, fields)}
  export = read_object("", data, top, label=f"A {fmt} ledger export")
  return export[key], export["dropped_samples"]


def merge_runs(runs: Iterable[Run]) -> List[Run]:
  """Merges consecutive runs of equal samples (counts add)."""
  out: List[Run] = []
  for run in runs:
    if out and out[-1].sample == run.sample:
      out[-1] = Run(run.sample, out[-1].count + run.count)
    else:
      out.append(run)
  return out


def total_samples(runs: Iterable[Run]) -> int:
  """The number of samples (steps) in ``runs``."""
  return sum(r.count for r in runs)


# --- Writing an export. ---

def sample_to_dict(sample: Sample) -> Dict[str, Any]:
  """A ``Sample`` as a (fresh) JSON-ready dict, without the
  ``OPTIONAL_SAMPLE_KEYS`` whose value is their default."""
  entry = dict(sample._asdict(), privacy_unit=str(sample.privacy_unit),
               sum_queries=[dict(zip(QUERY_KEYS, q))
                            for q in sample.sum_queries])
  return {k: v for k, v in entry.items()
          if k not in OPTIONAL_SAMPLE_KEYS or v != OPTIONAL_SAMPLE_KEYS[k]}


def encode(runs: Sequence[Run], dropped_samples: int,
           ledger_format: str = CURRENT_FORMAT) -> Dict[str, Any]:
  """The export dict of ``runs`` in ``ledger_format`` (1: one entry each)."""
  if ledger_format == FORMAT_V1:
    samples = [sample_to_dict(r.sample) for r in runs for _ in range(r.count)]
    return {"format": FORMAT_V1, "dropped_samples": int(dropped_samples),
            "samples": samples}
  if ledger_format == FORMAT_V2:
    runs_out = [dict(sample_to_dict(r.sample), count=int(r.count))
                for r in merge_runs(runs)]
    return {"format": FORMAT_V2, "dropped_samples": int(dropped_samples),
            "runs": runs_out}
  raise ValueError(f"ledger_format must be one of {READABLE_FORMATS}; got "
                   f"{ledger_format!r}.")


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
