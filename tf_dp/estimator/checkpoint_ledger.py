"""Read the privacy ledger that an Estimator (or v1 Session) run saved."""

import tensorflow as tf

from tf_dp.privacy_ledger import ledger_dict_from_buffers


def ledger_from_checkpoint(checkpoint, name="tf_dp_privacy_ledger"):
  """The ledger (plain data, as ``PrivacyLedger.to_dict``) in a checkpoint.

  Args:
    checkpoint: A checkpoint file prefix or a directory (e.g. an
      Estimator's ``model_dir``; its latest checkpoint is read).
    name: The ledger's variable name prefix.
  """
  path = tf.train.latest_checkpoint(checkpoint) or checkpoint
  reader = tf.train.load_checkpoint(path)
  get = lambda var: reader.get_tensor(f"{name}/{var}")
  return ledger_dict_from_buffers(get("samples"), get("queries"),
                                  int(get("sample_count")),
                                  int(get("query_count")),
                                  int(get("dropped_samples")))
