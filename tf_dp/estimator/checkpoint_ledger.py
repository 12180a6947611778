"""Read the privacy ledger that a training run saved in a checkpoint.

Works for Estimator and v1 Session checkpoints (variables named
``tf_dp_privacy_ledger/samples``, ...) and for object-based TF2 checkpoints
of a Keras DP optimizer (``tf.train.Checkpoint``, Keras 2 ``save_weights`` in
the TF format, ``BackupAndRestore`` of Keras 2, and the ``variables`` of a
Keras 2 SavedModel, whose loader does not restore optimizers).

A ledger is read whole or not at all: every buffer the accountant needs,
and a correlated-noise run's record (``DPOptimizer(..., noise_strategy=...)``)
with it, or a ``LedgerFormatError`` naming what is missing.
"""

import os

import tensorflow as tf

from tf_dp import correlated_noise_ledger
from tf_dp.analysis import ledger_schema
from tf_dp.errors import LedgerFormatError
from tf_dp.privacy_ledger import ledger_dict_from_buffers

_BUFFERS = ("samples", "queries", "sample_count", "query_count",
            "dropped_samples")
_OBJECT_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"
# The attribute of a PrivacyLedger holding its correlated-noise record.
_CORRELATED = "correlated_noise"


def _checkpoint_path(checkpoint):
  saved_model_variables = os.path.join(checkpoint, "variables", "variables")
  if os.path.exists(os.path.join(checkpoint, "saved_model.pb")):
    return saved_model_variables
  return tf.train.latest_checkpoint(checkpoint) or checkpoint


def _object_ledger_prefixes(keys):
  """Object paths of the ledgers in an object-based checkpoint."""
  marker = "/_samples" + _OBJECT_SUFFIX
  return sorted(k[:-len(marker)] for k in keys if k.endswith(marker))


def _named_ledger_prefixes(keys):
  """Variable-name prefixes of the ledgers of Estimator / v1 checkpoints
  (a second DP optimizer in one graph gets ``tf_dp_privacy_ledger_1``)."""
  return sorted(k[:-len("/samples")] for k in keys
                if k.endswith("/samples") and _OBJECT_SUFFIX not in k
                and f"{k[:-len('/samples')]}/sample_count" in keys)


def ledger_from_checkpoint(checkpoint, name=None):
  """The ledger (plain data, as ``PrivacyLedger.to_dict``) in a checkpoint.

  Args:
    checkpoint: A checkpoint file prefix, a directory (e.g. an Estimator's
      ``model_dir``; its latest checkpoint is read) or a Keras 2 SavedModel
      directory.
    name: The ledger's variable name prefix (Estimator / v1 checkpoints:
      ``"tf_dp_privacy_ledger"``, and ``"tf_dp_privacy_ledger_1"``... for
      further DP optimizers in the same graph), or its object path (e.g.
      ``"optimizer/dp_engine/ledger"``) in an object-based checkpoint.
      Required when the checkpoint holds several ledgers: each is one
      mechanism's record, and a run that trained several on the same data
      is private at the composition of all of them.

  Returns:
    The ledger as plain data, whole: ``compute_epsilon_from_ledger(data,
    delta)`` accounts it, and ``PrivacyLedger.from_dict(data,
    max_samples=...)`` makes a ledger to continue training with. A
    correlated-noise run's record is under ``"correlated_noise"`` (only
    accounted, never continued: its noise state is in no file).

  Raises:
    ValueError: if the checkpoint holds no ledger, or several and ``name``
      does not pick one.
    LedgerFormatError: if the ledger in it lacks a variable the accountant
      needs (its correlated-noise record's included).

  Example:
    >>> data = tf_dp.estimator.ledger_from_checkpoint(model_dir)
  """
  reader = tf.train.load_checkpoint(_checkpoint_path(checkpoint))
  keys = reader.get_variable_to_shape_map()
  named = _named_ledger_prefixes(keys)
  if name is None and len(named) > 1:
    raise ValueError(
        f"Found {len(named)} privacy ledgers in {checkpoint!r} ({named}): "
        f"one per DP optimizer in the graph. Read each with name= (one of "
        f"those) and account for all of them: the run is private at their "
        f"composition.")
  if name is None and named:
    name = named[0]
  if name in named:
    prefix, correlated = name, None
    path_of = lambda var: f"{name}/{var}"
  else:
    prefixes = _object_ledger_prefixes(keys)
    if name in prefixes:
      prefixes = [name]
    if len(prefixes) != 1:
      raise ValueError(
          f"Found {len(prefixes)} privacy ledgers in {checkpoint!r} "
          f"({prefixes}); expected one. Pass name= (one of those paths)."
          if prefixes else f"No tf_dp privacy ledger in {checkpoint!r}.")
    prefix = prefixes[0]
    path_of = lambda var: f"{prefix}/_{var}{_OBJECT_SUFFIX}"
    correlated = _correlated_record(reader, keys, prefix, checkpoint)
  get = _reader_of(reader, keys, checkpoint, prefix)
  samples, queries, n_samples, n_queries, dropped = (
      get(path_of(var), var) for var in _BUFFERS)
  data = ledger_dict_from_buffers(samples, queries, int(n_samples),
                                  int(n_queries), int(dropped))
  if correlated is not None:
    data[ledger_schema.CORRELATED_NOISE_KEY] = correlated
  return data


def _reader_of(reader, keys, checkpoint, prefix):
  """``get(path, field)``: a variable's value, or a LedgerFormatError
  naming the field missing from the ledger at ``prefix``."""

  def get(path, field):
    if path not in keys:
      raise LedgerFormatError(
          f"The privacy ledger {prefix!r} in {checkpoint!r} has no {field!r} "
          f"(no variable {path!r}): the file holds part of a ledger, and an "
          f"epsilon computed from part of it could be too small. Read the "
          f"file this ledger was saved to whole, or a saved "
          f"ledger.to_json().")
    return reader.get_tensor(path)
  return get


def _correlated_record(reader, keys, prefix, checkpoint):
  """The correlated-noise record of the ledger at ``prefix``, read whole,
  or None if the ledger has none."""
  record_prefix = f"{prefix}/{_CORRELATED}"
  if not any(key.startswith(record_prefix + "/") for key in keys):
    return None
  get = _reader_of(reader, keys, checkpoint, record_prefix)
  return correlated_noise_ledger.record_from_values(
      lambda var: get(f"{record_prefix}/{var}{_OBJECT_SUFFIX}", var))
