"""The privacy ledger: what every mechanism did, in ``tf.Variable`` buffers.

McMahan & Andrew (2018), Sec. 5: the ledger keeps **sampling events** (how a
sample of records was drawn: population size, sampling probability, Poisson
or fixed-size sampling, examples per record) and, for each sample, its
**sum-query events** (L2 clip, noise stddev). The accountant reads the ledger
after training (``tf_dp.analysis.compute_rdp_from_ledger``), so bugs in the
training or configuration code cannot change the privacy calculation, and the
ledger can be re-processed by a better accountant later.

Buffers are preallocated (``max_samples`` rows) and written with
``scatter_nd_update`` plus a count, which works eagerly, in ``tf.function``,
in ``model.fit`` graphs and under ``jit_compile=True``. A sample that would
not fit is not written, and the ``dropped_samples`` counter records it: the
accountant then refuses to compute epsilon. Nothing is ever dropped silently.

The row layout, the sampling kinds and the JSON export are defined once, in
the accountant's pure-Python schema (``tf_dp.analysis.ledger_schema``).
"""

import json
from typing import Any, Dict, Mapping, Optional, Tuple

import numpy as np
import tensorflow as tf

from tf_dp.analysis import checks
from tf_dp.analysis import ledger_schema
from tf_dp.analysis.ledger_schema import SamplingEvent
from tf_dp.dp_query import dp_query
from tf_dp.dp_query import events as events_lib
from tf_dp.dp_query.dp_query import Nest
from tf_dp.errors import LedgerFormatError
from tf_dp.errors import PrivacyError
from tf_dp.sampling import PrivacyUnit
from tf_dp.sampling import Sampling


# The names of ``export_buffers``'s arrays: the ledger's current sampling
# parameters, its counters and the rows written.
BUFFER_KEYS = ("population_size", "sampling_probability",
               "examples_per_record", "sampling_code", "sample_count",
               "query_count", "dropped_samples", "samples", "queries")


def _check_population_size(value):
  return checks.check_positive_int("population_size", value,
                                   " It is the number of records.")


def _check_sampling_event(event):
  """Validates the Python-valued fields of an explicit ``SamplingEvent``
  (tensor fields are taken as given)."""
  if not isinstance(event, SamplingEvent):
    raise TypeError(f"sampling_event must be a "
                    f"tf_dp.privacy_ledger.SamplingEvent; got {event!r}.")
  Sampling.check("sampling_event.sampling", event.sampling)
  PrivacyUnit.check("sampling_event.privacy_unit", event.privacy_unit)
  if not tf.is_tensor(event.population_size):
    checks.check_positive_int("sampling_event.population_size",
                              event.population_size)
  if not tf.is_tensor(event.sampling_probability):
    checks.check_probability("sampling_event.sampling_probability",
                             event.sampling_probability)
  if not tf.is_tensor(event.examples_per_record):
    checks.check_positive_int("sampling_event.examples_per_record",
                              event.examples_per_record)
  return event


class PrivacyLedger(tf.Module):
  """Records sampling and Gaussian sum-query events in TF variables.

  Privacy contract: every ``record_sample`` call writes exactly one sample
  (its sampling event and every Gaussian sum query of its event) or, when
  the ledger is full, counts it as dropped; nothing else writes the rows.

  Args:
    population_size: Number n of privacy units in the private dataset
      (examples, or users when ``privacy_unit="user"``).
    sampling_probability: Probability q that a unit is in a sample
      (Poisson), or the sample size divided by n (fixed-size).
    sampling: ``"poisson"`` (each record independently with probability q),
      ``"fixed_size"`` (an independent uniformly random subset of fixed
      size per sample; replace-one neighbours) or ``"shuffled"`` (batches
      of a shuffled pass over the data, as Keras ``fit`` takes them:
      accounted like ``"fixed_size"``, which is the conventional
      approximation, not a guarantee; the accountant warns) or
      ``"fixed_order"`` (the lots of passes in an order that may be known:
      accounted as passes, without amplification).
    examples_per_record: 1, or the microbatch size when a record is a
      microbatch.
    max_samples: Capacity in samples (steps). Size it for the whole run.
    max_queries_per_sample: Capacity in sum queries per sample on average.
    name: Module name.
    privacy_unit: ``"example"`` (default) or ``"user"``: what one record
      is, recorded with every sample (``tf_dp.sampling.PrivacyUnit``).

  Example:
    >>> ledger = PrivacyLedger(60000, 256 / 60000)
  """

  def __init__(self, population_size: int, sampling_probability: float,
               sampling: str = Sampling.POISSON, examples_per_record: int = 1,
               max_samples: int = 100000, max_queries_per_sample: int = 4,
               name: str = "privacy_ledger",
               privacy_unit: str = PrivacyUnit.EXAMPLE) -> None:
    super().__init__(name=name)
    population_size = _check_population_size(population_size)
    sampling_probability = checks.check_probability("sampling_probability",
                                                    sampling_probability)
    code = ledger_schema.sampling_code(sampling, privacy_unit)  # checks both
    examples_per_record = checks.check_positive_int("examples_per_record",
                                                    examples_per_record)
    self._max_samples = checks.check_positive_int("max_samples", max_samples,
                                                  integral_float=True)
    self._max_queries = self._max_samples * checks.check_positive_int(
        "max_queries_per_sample", max_queries_per_sample,
        integral_float=True)
    f64 = tf.float64
    self.population_size = tf.Variable(
        float(population_size), dtype=f64, trainable=False,
        name=f"{name}/population_size")
    self.sampling_probability = tf.Variable(
        sampling_probability, dtype=f64, trainable=False,
        name=f"{name}/sampling_probability")
    self.examples_per_record = tf.Variable(
        float(examples_per_record), dtype=f64, trainable=False,
        name=f"{name}/examples_per_record")
    self._sampling_code = tf.Variable(float(code), dtype=f64, trainable=False,
                                      name=f"{name}/sampling_code")
    self._samples = tf.Variable(
        tf.zeros([self._max_samples, len(ledger_schema.SAMPLE_ROW)], f64),
        trainable=False, name=f"{name}/samples")
    self._queries = tf.Variable(
        tf.zeros([self._max_queries, len(ledger_schema.QUERY_ROW)], f64),
        trainable=False, name=f"{name}/queries")
    self._sample_count = tf.Variable(0, dtype=tf.int32, trainable=False,
                                     name=f"{name}/sample_count")
    self._query_count = tf.Variable(0, dtype=tf.int32, trainable=False,
                                    name=f"{name}/query_count")
    self._dropped_samples = tf.Variable(0, dtype=tf.int32, trainable=False,
                                        name=f"{name}/dropped_samples")

  @property
  def sampling(self) -> Sampling:
    """The sampling kind recorded by default (eager only)."""
    return ledger_schema.sampling_kind(float(self._sampling_code.numpy()))

  @property
  def privacy_unit(self) -> PrivacyUnit:
    """The privacy unit recorded by default (eager only)."""
    return ledger_schema.privacy_unit(float(self._sampling_code.numpy()))

  @property
  def max_samples(self) -> int:
    return self._max_samples

  @property
  def sample_count(self) -> tf.Tensor:
    """Samples recorded so far plus samples dropped (a tensor, int32)."""
    return self._sample_count + self._dropped_samples

  def set_sample_size(self, population_size: Optional[int] = None,
                      sampling_probability: Optional[float] = None) -> None:
    """Changes n (and q) for the samples recorded from now on.

    A fixed-size sample's q is its size divided by n, so changing only n
    rescales the q recorded for later fixed-size samples of the same size
    (q * old_n / new_n); Poisson's q is the sampler's probability and stays
    unless given.
    """
    if population_size is not None:
      population_size = _check_population_size(population_size)
      old = float(self.population_size.numpy())
      if (sampling_probability is None
          and self.sampling is not Sampling.POISSON):
        self.sampling_probability.assign(
            min(1.0, float(self.sampling_probability.numpy()) * old
                / population_size))
      self.population_size.assign(float(population_size))
    if sampling_probability is not None:
      self.sampling_probability.assign(checks.check_probability(
          "sampling_probability", sampling_probability))

  def _configured_row(self, sample_size, examples_per_record):
    """The sample row of the ledger's configured event (graph-safe), with
    what was drawn: a fixed-size sample of ``sample_size`` examples records
    ``q = sample_size / n``; Poisson samples record the configured q."""
    q = self.sampling_probability.read_value()
    if sample_size is not None:
      is_poisson = tf.equal(
          tf.math.floormod(self._sampling_code,
                           float(ledger_schema.UNIT_CODE_STRIDE)),
          float(ledger_schema.sampling_code(Sampling.POISSON)))
      q = tf.where(is_poisson, q, tf.minimum(
          tf.cast(sample_size, tf.float64) / self.population_size, 1.0))
    per_record = self.examples_per_record.read_value()
    if examples_per_record is not None:
      per_record = tf.cast(examples_per_record, tf.float64)
    values = {"population_size": self.population_size.read_value(),
              "sampling_probability": q,
              "sampling_code": self._sampling_code.read_value(),
              "examples_per_record": per_record}
    return tf.stack([values[k] for k in ledger_schema.SAMPLE_ROW])

  def record_sample(
      self, sum_query_events: Nest,
      sampling_event: Optional[SamplingEvent] = None,
      sample_size: Optional[tf.Tensor] = None,
      examples_per_record: Optional[tf.Tensor] = None) -> tf.Tensor:
    """Records one sample and its Gaussian sum queries (graph-safe).

    A ``CorrelatedNoiseEvent`` goes to the attached correlated-noise ledger
    (``attach_correlated_noise``) and the sample is written with no sum
    query; without one it is refused. The sampling event is
    ``sampling_event`` when given; otherwise the ledger's configured event (its n, q, sampling and examples per record),
    refined by what was drawn (``sample_size``, ``examples_per_record``).

    Args:
      sum_query_events: A nested event from ``get_noised_result``.
      sampling_event: Optional ``SamplingEvent``: how this sample was drawn
        (fields may be tensors; ``sampling`` is a Python string).
      sample_size: Optional number of examples actually drawn (a tensor) for
        a fixed-size sample: q is then recorded as ``sample_size / n`` with
        the ledger's current n. Poisson samples record the sampler's q.
      examples_per_record: Optional examples per record of this sample.

    Returns:
      A boolean tensor: True if written, False if the ledger was full (then
      ``dropped_samples`` was incremented and epsilon cannot be computed).

    Raises:
      TypeError: if ``sampling_event`` is given with ``sample_size`` or
        ``examples_per_record`` (it already says what was drawn).
    """
    if sampling_event is not None:
      if sample_size is not None or examples_per_record is not None:
        raise TypeError("Give sampling_event alone: it already holds the "
                        "sample size (as its sampling_probability) and the "
                        "examples per record.")
      _check_sampling_event(sampling_event)
    sum_query_events, correlated = self._route_correlated(sum_query_events)
    flat = events_lib.flatten_events(sum_query_events)
    num_queries = len(flat)
    sample_index = self._sample_count.read_value()
    query_start = self._query_count.read_value()
    fits = tf.logical_and(sample_index < self._max_samples,
                          query_start + num_queries <= self._max_queries)

    # Each branch's result depends on its writes explicitly, so they run in
    # plain v1 graphs too (where no automatic control dependencies exist).
    def write():
      if sampling_event is None:
        row = self._configured_row(sample_size, examples_per_record)
      else:
        row = tf.stack([_float64(v) for v in
                        ledger_schema.sample_row(sampling_event)])
      writes = [_scatter(self._samples, tf.reshape(sample_index, [1, 1]),
                         row[None])]
      if num_queries:
        rows = tf.stack([tf.stack([tf.cast(sample_index, tf.float64),
                                   tf.cast(e.l2_norm_clip, tf.float64),
                                   tf.cast(e.noise_stddev, tf.float64)])
                         for e in flat])
        indices = tf.reshape(query_start + tf.range(num_queries), [-1, 1])
        writes.append(_scatter(self._queries, indices, rows))
      with tf.control_dependencies(writes):
        counts = [self._sample_count.assign_add(1)]
        if num_queries:
          counts.append(self._query_count.assign_add(num_queries))
      with tf.control_dependencies(counts):
        return tf.constant(True)

    def drop():
      with tf.control_dependencies([self._dropped_samples.assign_add(1)]):
        return tf.constant(False)

    with tf.control_dependencies([] if correlated is None else [
        self.correlated_noise.record_sample(correlated)]):
      return tf.cond(fits, write, drop)

  def attach_correlated_noise(self, ledger: Any) -> None:
    """Records the ``CorrelatedNoiseEvent``s of the samples in ``ledger``
    (a ``tf_dp.correlated_noise_ledger.CorrelatedNoiseLedger``, saved with
    this one in checkpoints): each such sample is still counted here, with
    no sum query, and ``to_dict()`` carries the correlated record under
    ``"correlated_noise"``, which only
    ``tf_dp.analysis.compute_epsilon_from_ledger`` accounts (every other
    reader of the export refuses it)."""
    self.correlated_noise = ledger

  def _route_correlated(self, event):
    """``(event without its CorrelatedNoiseEvent, that event or None)``.

    Raises:
      PrivacyError: for a CorrelatedNoiseEvent without an attached ledger.
      PrivacyError: if the sample also holds Gaussian sum queries (their
        composition with the correlated record is not accounted).
    """
    leaves = [e for e in tf.nest.flatten(event)
              if isinstance(e, events_lib.CorrelatedNoiseEvent)]
    if not leaves:
      return event, None
    if getattr(self, "correlated_noise", None) is None:
      return event, None  # flatten_events refuses it, with the reason.
    rest = tf.nest.map_structure(
        lambda e: events_lib.NoOpEvent() if isinstance(
            e, events_lib.CorrelatedNoiseEvent) else e, event)
    if events_lib.flatten_events(rest) or len(leaves) != 1:
      raise PrivacyError(
          "A sample with correlated noise must release nothing else (no "
          "private metrics, no DP batch-norm statistics): the composition "
          "of a correlated-noise run with independent Gaussian queries is "
          f"not accounted. Got {event!r}.")
    return rest, leaves[0]

  def _variables_by_key(self):
    return dict(zip(BUFFER_KEYS, (
        self.population_size, self.sampling_probability,
        self.examples_per_record, self._sampling_code, self._sample_count,
        self._query_count, self._dropped_samples, self._samples,
        self._queries)))

  def export_buffers(self) -> Dict[str, Any]:
    """The ledger's state as ``{key: numpy array}`` (eager only).

    Keys are ``BUFFER_KEYS``: the configured sampling parameters, the
    counters, and the sample and query rows written so far (at least one
    row each: some stores cannot hold an empty array). ``import_buffers``
    restores it; this is what a saved model or a checkpoint must keep.
    """
    out = {key: np.asarray(tf.convert_to_tensor(variable))
           for key, variable in self._variables_by_key().items()}
    out["samples"] = out["samples"][:max(int(out["sample_count"]), 1)]
    out["queries"] = out["queries"][:max(int(out["query_count"]), 1)]
    return out

  def import_buffers(self, state: Mapping[str, Any]) -> None:
    """Overwrites the ledger with ``state`` (an ``export_buffers`` dict).

    Raises:
      LedgerFormatError: naming the missing key, or if the state holds more
        rows than this ledger has room for (rebuild it with a larger
        ``max_samples`` / ``max_queries_per_sample``).
    """
    missing = [k for k in BUFFER_KEYS if k not in state]
    if missing:
      raise LedgerFormatError(f"state must have the keys {BUFFER_KEYS}; "
                              f"missing {missing}.")
    variables = self._variables_by_key()
    for key, count_key in (("samples", "sample_count"),
                           ("queries", "query_count")):
      buffer = variables[key]
      count = int(state[count_key])
      if count > buffer.shape[0]:
        raise LedgerFormatError(
            f"The state holds {count} rows in {key} but this ledger has "
            f"room for {buffer.shape[0]}. Rebuild the PrivacyLedger with a "
            f"larger max_samples (or max_queries_per_sample).")
      full = np.zeros(buffer.shape, np.float64)
      full[:count] = np.asarray(state[key], np.float64)[:count]
      buffer.assign(full)
    for key in BUFFER_KEYS:
      if key not in ("samples", "queries"):
        variable = variables[key]
        variable.assign(tf.cast(state[key], variable.dtype))

  def to_dict(self, ledger_format: Optional[str] = None) -> Dict[str, Any]:
    """The ledger as plain Python data (eager only); see ``from_dict``.

    Args:
      ledger_format: ``"tf_dp.privacy_ledger/1"`` (default: one entry per
        sample under ``"samples"``) or ``"tf_dp.privacy_ledger/2"`` (runs of
        identical consecutive samples under ``"runs"``, each with a
        ``"count"``); see ``tf_dp.analysis.ledger_schema``.
    """
    out = ledger_dict_from_buffers(
        self._samples.numpy(), self._queries.numpy(),
        int(self._sample_count.numpy()), int(self._query_count.numpy()),
        int(self._dropped_samples.numpy()), ledger_format)
    if getattr(self, "correlated_noise", None) is not None:
      out[ledger_schema.CORRELATED_NOISE_KEY] = self.correlated_noise.to_dict()
    return out

  def to_json(self, ledger_format: Optional[str] = None) -> str:
    """The ledger as JSON text, run-length encoded (format 2) by default.

    A 10^6-step run with constant hyperparameters is one run (well under
    1 kB). Pass ``ledger_format="tf_dp.privacy_ledger/1"`` for one entry
    per sample (~200 bytes each).
    """
    return json.dumps(self.to_dict(ledger_format or
                                   ledger_schema.CURRENT_FORMAT))

  @classmethod
  def from_dict(cls, data: Mapping[str, Any],
                max_samples: Optional[int] = None) -> "PrivacyLedger":
    """Rebuilds a ledger (eagerly) from a ``to_dict()``/JSON export.

    Reads formats 1 and 2, validating every field with
    ``tf_dp.analysis.ledger_schema.decode`` (``ValueError`` names a bad
    field). The buffers are written in bulk; samples beyond
    ``max_samples`` (default: all of them) are counted as dropped. The
    ledger's configured event is that of the last sample.
    """
    runs, dropped = ledger_schema.decode(data)
    sample_rows, query_rows = ledger_schema.buffers_from_runs(runs)
    total = len(sample_rows)
    capacity = max_samples or max(total, 1)
    kept = min(total, capacity)
    query_rows = query_rows[query_rows[:, 0] < kept]
    per_sample = max([len(r.sample.sum_queries) for r in runs] + [1])
    last = runs[-1].sample if runs else ledger_schema.Sample(
        1, 0.0, Sampling.POISSON, 1, ())
    ledger = cls(last.population_size, last.sampling_probability,
                 last.sampling, last.examples_per_record,
                 max_samples=capacity, max_queries_per_sample=per_sample,
                 privacy_unit=last.privacy_unit)
    state = ledger.export_buffers()
    state.update(samples=sample_rows[:kept], queries=query_rows,
                 sample_count=kept, query_count=len(query_rows),
                 dropped_samples=dropped + total - kept)
    ledger.import_buffers(state)
    return ledger

  @classmethod
  def from_json(cls, text: str,
                max_samples: Optional[int] = None) -> "PrivacyLedger":
    """Rebuilds a ledger from ``to_json()`` text (format 1 or 2)."""
    try:
      data = json.loads(text)
    except json.JSONDecodeError as e:
      raise LedgerFormatError(
          f"text is not a JSON ledger export: {e}.") from None
    return cls.from_dict(data, max_samples)


def _float64(value):
  """A float64 tensor of ``value`` (a Python number converts exactly)."""
  if tf.is_tensor(value):
    return tf.cast(value, tf.float64)
  return tf.constant(float(value), tf.float64)


def _scatter(variable, indices, updates):
  """In-place row writes; distributed (mirrored) variables, which have no
  scatter_nd_update, get a copy-and-assign instead (in cross-replica
  context this updates every replica's copy)."""
  try:
    return variable.scatter_nd_update(indices, updates)
  except NotImplementedError:
    return variable.assign(tf.tensor_scatter_nd_update(variable, indices,
                                                       updates))


def ledger_dict_from_buffers(
    samples: np.ndarray, queries: np.ndarray, n_samples: int, n_queries: int,
    dropped_samples: int, ledger_format: Optional[str] = None
) -> Dict[str, Any]:
  """Plain-data ledger from the raw buffers (also read from checkpoints).

  Args:
    samples: The sample buffer (a numpy array).
    queries: The query buffer (a numpy array).
    n_samples: How many rows of ``samples`` were written.
    n_queries: How many rows of ``queries`` were written.
    dropped_samples: Samples the ledger could not record.
    ledger_format: ``tf_dp.analysis.ledger_schema.FORMAT_V1`` (default: one
      entry per sample, for code that indexes ``["samples"]``) or
      ``FORMAT_V2`` (runs of identical consecutive samples with a count).
  """
  runs = ledger_schema.runs_from_buffers(samples, queries, n_samples,
                                         n_queries)
  return ledger_schema.encode(runs, dropped_samples,
                              ledger_format or ledger_schema.FORMAT_V1)


class QueryWithLedger(dp_query.WrapperQuery):
  """Wraps a query so that each noised result records one ledger sample.

  Privacy contract: that of the wrapped query; in addition, every call of
  ``get_noised_result`` writes one sampling event (``sampling_event`` if
  given, else the ledger's configured n, q, sampling method and examples
  per record) and every Gaussian sum query of the returned event, after the
  noise has been added.
  """

  def __init__(self, query: dp_query.DPQuery, ledger: PrivacyLedger,
               sampling_event: Optional[SamplingEvent] = None) -> None:
    if not isinstance(query, dp_query.DPQuery):
      raise TypeError(f"query must be a DPQuery; got {query!r}.")
    if not isinstance(ledger, PrivacyLedger):
      raise TypeError(f"ledger must be a PrivacyLedger; got {ledger!r}.")
    super().__init__(query)
    self._ledger = ledger
    self._sampling_event = (None if sampling_event is None
                            else _check_sampling_event(sampling_event))

  @property
  def query(self) -> dp_query.DPQuery:
    return self._wrapped

  @property
  def ledger(self) -> PrivacyLedger:
    return self._ledger

  def get_noised_result(self, sample_state: Nest,
                        global_state: Nest) -> Tuple[Nest, Nest, Nest]:
    result, new_state, event = self._wrapped.get_noised_result(sample_state,
                                                               global_state)
    written = self._ledger.record_sample(event, self._sampling_event)
    with tf.control_dependencies([written]):
      result = tf.nest.map_structure(tf.identity, result)
    return result, new_state, event
