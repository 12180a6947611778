"""Tests of tf_dp.estimator.checkpoint_ledger on object-based checkpoints
(``tf.train.Checkpoint`` of ledgers): the ledger read back equals
``PrivacyLedger.to_dict`` of the saved one, several ledgers need ``name=``,
and a checkpoint without a ledger says so. Estimator / v1 checkpoints (named
variables) are read in tests/estimator/test_dp_optimizer_v1.py, which
trains the optimizers that write them."""

import pytest
import tensorflow as tf

from tf_dp.dp_query import SumQueryEvent
from tf_dp.estimator import checkpoint_ledger
from tf_dp.privacy_ledger import PrivacyLedger


def _ledger(population_size, q, clips_and_stddevs):
  ledger = PrivacyLedger(population_size, q, max_samples=10)
  for clip, stddev in clips_and_stddevs:
    ledger.record_sample(SumQueryEvent(tf.constant(clip),
                                       tf.constant(stddev)))
  return ledger


def test_the_saved_ledger_reads_back_as_it_was(tmp_path):
  ledger = _ledger(1000, 0.05, [(1.0, 1.1), (1.0, 1.1), (0.5, 2.0)])
  tf.train.Checkpoint(ledger=ledger).save(str(tmp_path / "run" / "ckpt"))
  got = checkpoint_ledger.ledger_from_checkpoint(str(tmp_path / "run"))
  assert got == ledger.to_dict()
  assert len(got["samples"]) == 3


def test_several_ledgers_need_a_name_and_each_reads_back(tmp_path):
  first = _ledger(1000, 0.05, [(1.0, 1.1)])
  second = _ledger(500, 0.1, [(2.0, 3.0), (2.0, 3.0)])
  path = tf.train.Checkpoint(a=first, b=second).save(str(tmp_path / "ckpt"))
  with pytest.raises(ValueError, match=r"Found 2 privacy ledgers.*\['a', "
                     r"'b'\].*Pass name="):
    checkpoint_ledger.ledger_from_checkpoint(path)
  assert checkpoint_ledger.ledger_from_checkpoint(path, name="a") == (
      first.to_dict())
  assert checkpoint_ledger.ledger_from_checkpoint(path, name="b") == (
      second.to_dict())


def test_a_checkpoint_without_a_ledger_is_refused(tmp_path):
  path = tf.train.Checkpoint(v=tf.Variable(1.0)).save(str(tmp_path / "c"))
  with pytest.raises(ValueError, match="No tf_dp privacy ledger in"):
    checkpoint_ledger.ledger_from_checkpoint(path)
