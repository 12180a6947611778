"""The privacy ledger: what every mechanism did, in ``tf.Variable`` buffers.

McMahan & Andrew (2018), Sec. 5: the ledger keeps **sampling events** (how a
sample of records was drawn: population size, selection probability, Poisson
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
"""

import json

import numpy as np
import tensorflow as tf

from tf_dp.analysis import ledger_schema
from tf_dp.dp_query import dp_query
from tf_dp.dp_query import events as events_lib

# The sampling kinds and the export format are defined once, in the
# accountant's pure-Python schema.
SAMPLING_METHODS = ledger_schema.SAMPLING_KINDS
LEDGER_FORMAT = ledger_schema.FORMAT_V1


class PrivacyLedger(tf.Module):
  """Records sampling and Gaussian sum-query events in TF variables.

  Args:
    population_size: Number of records n in the private dataset.
    selection_probability: Probability q that a record is in a sample
      (Poisson), or the sample size divided by n (fixed-size).
    sampling: ``"poisson"`` (each record independently with probability q),
      ``"fixed_size"`` (an independent uniformly random subset of fixed
      size per sample; replace-one neighbours) or ``"shuffled"`` (batches
      of a shuffled pass over the data, as Keras ``fit`` takes them:
      accounted like ``"fixed_size"``, which is the conventional
      approximation, not a guarantee; the accountant warns).
    examples_per_record: 1, or the microbatch size when a record is a
      microbatch.
    max_samples: Capacity in samples (steps). Size it for the whole run.
    max_queries_per_sample: Capacity in sum queries per sample on average.
    name: Module name.

  Example:
    >>> ledger = PrivacyLedger(60000, 256 / 60000)
  """

  def __init__(self, population_size, selection_probability,
               sampling="poisson", examples_per_record=1, max_samples=100000,
               max_queries_per_sample=4, name="privacy_ledger"):
    super().__init__(name=name)
    if not (isinstance(population_size, (int, np.integer))
            and population_size >= 1):
      raise ValueError("population_size must be an integer >= 1 (the number "
                       f"of records); got {population_size!r}.")
    if not 0 <= float(selection_probability) <= 1:
      raise ValueError("selection_probability must lie in [0, 1]; got "
                       f"{selection_probability!r}.")
    if sampling not in SAMPLING_METHODS:
      raise ValueError(f"sampling must be one of {SAMPLING_METHODS}; got "
                       f"{sampling!r}.")
    if not (isinstance(examples_per_record, (int, np.integer))
            and examples_per_record >= 1):
      raise ValueError("examples_per_record must be an integer >= 1; got "
                       f"{examples_per_record!r}.")
    if int(max_samples) < 1 or int(max_queries_per_sample) < 1:
      raise ValueError("max_samples and max_queries_per_sample must be >= 1.")
    f64 = tf.float64
    self.population_size = tf.Variable(float(population_size), dtype=f64,
                                       trainable=False, name=f"{name}/population_size")
    self.selection_probability = tf.Variable(
        float(selection_probability), dtype=f64, trainable=False,
        name=f"{name}/selection_probability")
    self.examples_per_record = tf.Variable(
        float(examples_per_record), dtype=f64, trainable=False,
        name=f"{name}/examples_per_record")
    self._sampling_code = tf.Variable(float(SAMPLING_METHODS.index(sampling)),
                                      dtype=f64, trainable=False,
                                      name=f"{name}/sampling_code")
    self._max_samples = int(max_samples)
    self._max_queries = int(max_samples) * int(max_queries_per_sample)
    # Sample rows: population_size, selection_probability, sampling code,
    # examples_per_record. Query rows: sample index, l2_norm_clip, stddev.
    self._samples = tf.Variable(tf.zeros([self._max_samples, 4], f64),
                                trainable=False, name=f"{name}/samples")
    self._queries = tf.Variable(tf.zeros([self._max_queries, 3], f64),
                                trainable=False, name=f"{name}/queries")
    self._sample_count = tf.Variable(0, dtype=tf.int32, trainable=False,
                                     name=f"{name}/sample_count")
    self._query_count = tf.Variable(0, dtype=tf.int32, trainable=False,
                                    name=f"{name}/query_count")
    self._dropped_samples = tf.Variable(0, dtype=tf.int32, trainable=False,
                                        name=f"{name}/dropped_samples")

  @property
  def sampling(self):
    return SAMPLING_METHODS[int(self._sampling_code.numpy())]

  @property
  def max_samples(self):
    return self._max_samples

  @property
  def sample_count(self):
    """Samples recorded so far plus samples dropped (a tensor, int32)."""
    return self._sample_count + self._dropped_samples

  def set_sample_size(self, population_size=None, selection_probability=None):
    """Changes n (and q) for the samples recorded from now on.

    A fixed-size sample's q is its size divided by n, so changing only n
    rescales the q recorded for later fixed-size samples of the same size
    (q * old_n / new_n); Poisson's q is the sampler's probability and stays
    unless given.
    """
    if population_size is not None:
      if not (isinstance(population_size, (int, np.integer))
              and population_size >= 1):
        raise ValueError("population_size must be an integer >= 1; got "
                         f"{population_size!r}.")
      old = float(self.population_size.numpy())
      if selection_probability is None and self.sampling != "poisson":
        self.selection_probability.assign(
            min(1.0, float(self.selection_probability.numpy()) * old
                / population_size))
      self.population_size.assign(float(population_size))
    if selection_probability is not None:
      if not 0 <= float(selection_probability) <= 1:
        raise ValueError("selection_probability must lie in [0, 1]; got "
                         f"{selection_probability!r}.")
      self.selection_probability.assign(float(selection_probability))

  def record_sample(self, sum_query_events, sample_size=None,
                    examples_per_record=None):
    """Records one sample and its Gaussian sum queries (graph-safe).

    Args:
      sum_query_events: A nested event from ``get_noised_result``.
      sample_size: Optional number of examples actually drawn (a tensor) for
        a fixed-size sample: q is then recorded as ``sample_size / n`` with
        the ledger's current n. Poisson samples record the sampler's q.
      examples_per_record: Optional examples per record of this sample.

    Returns:
      A boolean tensor: True if written, False if the ledger was full (then
      ``dropped_samples`` was incremented and epsilon cannot be computed).
    """
    flat = events_lib.flatten_events(sum_query_events)
    num_queries = len(flat)
    sample_index = self._sample_count.read_value()
    query_start = self._query_count.read_value()
    fits = tf.logical_and(sample_index < self._max_samples,
                          query_start + num_queries <= self._max_queries)

    # Each branch's result depends on its writes explicitly, so they run in
    # plain v1 graphs too (where no automatic control dependencies exist).
    def write():
      q = self.selection_probability.read_value()
      if sample_size is not None:  # Fixed-size: q = drawn / n.
        is_poisson = tf.equal(self._sampling_code,
                              float(SAMPLING_METHODS.index("poisson")))
        q = tf.where(is_poisson, q, tf.minimum(
            tf.cast(sample_size, tf.float64) / self.population_size, 1.0))
      per_record = self.examples_per_record.read_value()
      if examples_per_record is not None:
        per_record = tf.cast(examples_per_record, tf.float64)
      row = tf.stack([self.population_size.read_value(), q,
                      self._sampling_code.read_value(), per_record])
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

    return tf.cond(fits, write, drop)

  def to_dict(self, ledger_format=None):
    """The ledger as plain Python data (eager only); see ``from_dict``.

    Args:
      ledger_format: ``"tf_dp.privacy_ledger/1"`` (default: one entry per
        sample under ``"samples"``) or ``"tf_dp.privacy_ledger/2"`` (runs of
        identical consecutive samples under ``"runs"``, each with a
        ``"count"``); see ``tf_dp.analysis.ledger_schema``.
    """
    return ledger_dict_from_buffers(
        self._samples.numpy(), self._queries.numpy(),
        int(self._sample_count.numpy()), int(self._query_count.numpy()),
        int(self._dropped_samples.numpy()), ledger_format)

  def to_json(self, ledger_format=None):
    """The ledger as JSON text, run-length encoded (format 2) by default.

    A 10^6-step run with constant hyperparameters is one run (well under
    1 kB). Pass ``ledger_format="tf_dp.privacy_ledger/1"`` for readers from
    before format 2 (one entry per sample, ~200 bytes each).
    """
    from tf_dp.analysis import ledger_schema  # pylint: disable=g-import-not-at-top
    return json.dumps(self.to_dict(ledger_format or
                                   ledger_schema.CURRENT_FORMAT))

  @classmethod
  def from_dict(cls, data, max_samples=None):
    """Rebuilds a ledger (eagerly) from a ``to_dict()``/JSON export.

    Reads formats 1 and 2, validating every field with
    ``tf_dp.analysis.ledger_schema.decode`` (``ValueError`` names a bad
    field). The buffers are written in bulk; samples beyond
    ``max_samples`` (default: all of them) are counted as dropped.
    """
    from tf_dp.analysis import ledger_schema  # pylint: disable=g-import-not-at-top
    runs, dropped = ledger_schema.decode(data)
    sample_rows, query_rows = ledger_schema.buffers_from_runs(runs)
    total = len(sample_rows)
    capacity = max_samples or max(total, 1)
    kept = min(total, capacity)
    query_rows = query_rows[query_rows[:, 0] < kept]
    per_sample = max([len(r.sample.sum_queries) for r in runs] + [1])
    last = runs[-1].sample if runs else ledger_schema.Sample(
        1, 0.0, "poisson", 1, ())
    ledger = cls(last.population_size, last.selection_probability,
                 "poisson", last.examples_per_record, max_samples=capacity,
                 max_queries_per_sample=per_sample)
    # pylint: disable=protected-access
    ledger._sampling_code.assign(
        float(ledger_schema.sampling_code(last.sampling)))
    for buffer, rows in ((ledger._samples, sample_rows[:kept]),
                         (ledger._queries, query_rows)):
      full = np.zeros(buffer.shape, dtype=np.float64)
      full[:len(rows)] = rows
      buffer.assign(full)
    ledger._sample_count.assign(kept)
    ledger._query_count.assign(len(query_rows))
    ledger._dropped_samples.assign(dropped + total - kept)
    # pylint: enable=protected-access
    return ledger

  @classmethod
  def from_json(cls, text, max_samples=None):
    """Rebuilds a ledger from ``to_json()`` text (format 1 or 2)."""
    try:
      data = json.loads(text)
    except json.JSONDecodeError as e:
      raise ValueError(f"text is not a JSON ledger export: {e}.") from None
    return cls.from_dict(data, max_samples)


def _scatter(variable, indices, updates):
  """In-place row writes; distributed (mirrored) variables, which have no
  scatter_nd_update, get a copy-and-assign instead (in cross-replica
  context this updates every replica's copy)."""
  try:
    return variable.scatter_nd_update(indices, updates)
  except NotImplementedError:
    return variable.assign(tf.tensor_scatter_nd_update(variable, indices,
                                                       updates))


def ledger_dict_from_buffers(samples, queries, n_samples, n_queries,
                             dropped_samples, ledger_format=None):
  """Plain-data ledger from the raw buffers (also read from checkpoints).

  Args:
    samples, queries: The sample and query buffers (numpy arrays).
    n_samples, n_queries: How many rows of each were written.
    dropped_samples: Samples the ledger could not record.
    ledger_format: ``tf_dp.analysis.ledger_schema.FORMAT_V1`` (default: one
      entry per sample, for code that indexes ``["samples"]``) or
      ``FORMAT_V2`` (runs of identical consecutive samples with a count).
  """
  from tf_dp.analysis import ledger_schema  # pylint: disable=g-import-not-at-top
  runs = ledger_schema.runs_from_buffers(samples, queries, n_samples,
                                         n_queries)
  return ledger_schema.encode(runs, dropped_samples,
                              ledger_format or ledger_schema.FORMAT_V1)


class QueryWithLedger(dp_query.DPQuery):
  """Wraps a query so that each noised result records one ledger sample.

  Privacy contract: that of the wrapped query; in addition, every call of
  ``get_noised_result`` writes one sampling event (with the ledger's current
  n, q, sampling method and examples per record) and every Gaussian sum
  query of the returned event, after the noise has been added.
  """

  def __init__(self, query, ledger):
    if not isinstance(query, dp_query.DPQuery):
      raise TypeError(f"query must be a DPQuery; got {query!r}.")
    if not isinstance(ledger, PrivacyLedger):
      raise TypeError(f"ledger must be a PrivacyLedger; got {ledger!r}.")
    self._query = query
    self._ledger = ledger

  @property
  def query(self):
    return self._query

  @property
  def ledger(self):
    return self._ledger

  def initial_global_state(self):
    return self._query.initial_global_state()

  def derive_sample_params(self, global_state):
    return self._query.derive_sample_params(global_state)

  def initial_sample_state(self, template=None):
    return self._query.initial_sample_state(template)

  def preprocess_record(self, params, record):
    return self._query.preprocess_record(params, record)

  def accumulate_preprocessed_record(self, sample_state, preprocessed_record):
    return self._query.accumulate_preprocessed_record(sample_state,
                                                      preprocessed_record)

  def merge_sample_states(self, sample_state_1, sample_state_2):
    return self._query.merge_sample_states(sample_state_1, sample_state_2)

  def get_noised_result(self, sample_state, global_state):
    result, new_state, event = self._query.get_noised_result(sample_state,
                                                             global_state)
    written = self._ledger.record_sample(event)
    with tf.control_dependencies([written]):
      result = tf.nest.map_structure(tf.identity, result)
    return result, new_state, event

  def derive_metrics(self, global_state):
    return self._query.derive_metrics(global_state)

  def supports_record_scales(self):
    return self._query.supports_record_scales()

  def record_scales(self, params, sq_norms):
    return self._query.record_scales(params, sq_norms)

  def preprocessed_sum(self, scaled_sum, extra_sum):
    return self._query.preprocessed_sum(scaled_sum, extra_sum)
