"""Read the privacy ledger that a training run saved in a checkpoint.

Works for Estimator and v1 Session checkpoints (variables named
``tf_dp_privacy_ledger/samples``, ...) and for object-based TF2 checkpoints
of a Keras DP optimizer (``tf.train.Checkpoint``, Keras 2 ``save_weights`` in
the TF format, ``BackupAndRestore`` of Keras 2, and the ``variables`` of a
Keras 2 SavedModel, whose loader does not restore optimizers).
"""

import os

import tensorflow as tf

from tf_dp.privacy_ledger import ledger_dict_from_buffers

_BUFFERS = ("samples", "queries", "sample_count", "query_count",
            "dropped_samples")
_OBJECT_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"


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
    The ledger as plain data; ``PrivacyLedger.from_dict(data,
    max_samples=...)`` makes a ledger to continue training with.

  Raises:
    ValueError: if the checkpoint holds no ledger, or several and ``name``
      does not pick one.

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
    get = lambda var: reader.get_tensor(f"{name}/{var}")
  else:
    prefixes = _object_ledger_prefixes(keys)
    if name in prefixes:
      prefixes = [name]
    if len(prefixes) != 1:
      raise ValueError(
          f"Found {len(prefixes)} privacy ledgers in {checkpoint!r} "
          f"({prefixes}); expected one. Pass name= (one of those paths)."
          if prefixes else f"No tf_dp privacy ledger in {checkpoint!r}.")
    get = lambda var: reader.get_tensor(
        f"{prefixes[0]}/_{var}{_OBJECT_SUFFIX}")
  samples, queries, n_samples, n_queries, dropped = (
      get(var) for var in _BUFFERS)
  return ledger_dict_from_buffers(samples, queries, int(n_samples),
                                  int(n_queries), int(dropped))
