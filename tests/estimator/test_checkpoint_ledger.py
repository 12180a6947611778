"""Tests of tf_dp.estimator.checkpoint_ledger on object-based checkpoints
(``tf.train.Checkpoint`` of ledgers): the ledger read back equals
``PrivacyLedger.to_dict`` of the saved one (a correlated-noise record
included), several ledgers need ``name=``, a checkpoint without a ledger
says so, and part of a ledger is refused. Estimator / v1 checkpoints (named
variables) are read in tests/estimator/test_dp_optimizer_v1.py, which
trains the optimizers that write them."""

import pytest
import tensorflow as tf

from tf_dp.analysis import compute_epsilon_from_ledger
from tf_dp.analysis import matrix_factorization as mf
from tf_dp.correlated_noise_ledger import CorrelatedNoiseLedger
from tf_dp.dp_query import SumQueryEvent
from tf_dp.dp_query.correlated_noise_query import CorrelatedNoiseQuery
from tf_dp.errors import LedgerFormatError
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


def _correlated_ledger(steps):
  """A PrivacyLedger with a correlated-noise record of ``steps`` steps."""
  strategy = mf.banded_strategy(10, 2)
  query = CorrelatedNoiseQuery(1.5, 2.0, strategy, [tf.zeros([3])])
  ledger = PrivacyLedger(100, 0.1, max_samples=10)
  ledger.attach_correlated_noise(CorrelatedNoiseLedger(strategy))
  state = query.initial_global_state()
  for _ in range(steps):
    _, state, event = query.get_noised_result([tf.zeros([3])], state)
    ledger.record_sample(event)
  ledger.correlated_noise.record_participation(1, 0)
  return ledger


def test_a_correlated_noise_record_is_read_whole(tmp_path):
  """Its samples hold no Gaussian query (read alone: epsilon 0); the
  record read with them gives the run's epsilon."""
  ledger = _correlated_ledger(4)
  path = tf.train.Checkpoint(ledger=ledger).write(str(tmp_path / "c"))
  got = checkpoint_ledger.ledger_from_checkpoint(path)
  assert got == ledger.to_dict()
  assert got["correlated_noise"]["steps_run"] == 4
  epsilon = compute_epsilon_from_ledger(got, 1e-5)[0]
  assert epsilon == pytest.approx(ledger.correlated_noise.epsilon(1e-5),
                                  rel=1e-12)
  assert epsilon > 1.0


class _Partial(tf.Module):
  """Some of a ledger's variables, under the names a ledger saves."""

  def __init__(self, ledger, left_out, record_left_out=None):
    super().__init__()
    for name in ("_samples", "_queries", "_sample_count", "_query_count",
                 "_dropped_samples"):
      if name != left_out:
        setattr(self, name, getattr(ledger, name))
    record = getattr(ledger, "correlated_noise", None)
    if record is not None:
      self.correlated_noise = tf.Module()
      for name in ("fixed_fields", "l2_norm_clip", "noise_stddev", "passes",
                   "min_separation", "steps_run", "inconsistent_steps"):
        if name != record_left_out:
          setattr(self.correlated_noise, name, getattr(record, name))


@pytest.mark.parametrize("left_out", ["_queries", "_sample_count",
                                      "_query_count", "_dropped_samples"])
def test_a_ledger_missing_a_buffer_is_refused(left_out, tmp_path):
  ledger = _ledger(1000, 0.05, [(1.0, 1.1)])
  path = tf.train.Checkpoint(ledger=_Partial(ledger, left_out)).write(
      str(tmp_path / "c"))
  with pytest.raises(LedgerFormatError,
                     match=f"has no '{left_out[1:]}'.*part of a ledger"):
    checkpoint_ledger.ledger_from_checkpoint(path)


@pytest.mark.parametrize("left_out", ["fixed_fields", "steps_run",
                                      "min_separation", "noise_stddev"])
def test_a_correlated_noise_record_missing_a_field_is_refused(left_out,
                                                              tmp_path):
  """A file whose correlated-noise record lacks a field (one written before
  the record kept its strategy lacks ``fixed_fields``) is refused, not read
  as its samples alone (an epsilon of 0)."""
  partial = _Partial(_correlated_ledger(2), None, record_left_out=left_out)
  path = tf.train.Checkpoint(ledger=partial).write(str(tmp_path / "c"))
  with pytest.raises(LedgerFormatError, match=f"has no '{left_out}'"):
    checkpoint_ledger.ledger_from_checkpoint(path)
