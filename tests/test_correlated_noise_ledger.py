"""CorrelatedNoiseLedger records a CorrelatedNoiseQuery run; the accountant
reads it and refuses what the strategy does not cover."""

import math

import pytest
import tensorflow as tf

from tf_dp.analysis import matrix_factorization as mf
from tf_dp.analysis import pld_gaussian
from tf_dp.correlated_noise_ledger import CorrelatedNoiseLedger
from tf_dp.dp_query.correlated_noise_query import CorrelatedNoiseQuery
from tf_dp.errors import PrivacyError


def _run(query, ledger, steps, state=None):
  state = state if state is not None else query.initial_global_state()
  step = tf.function(lambda s: _step(query, ledger, s))
  for _ in range(steps):
    state = step(state)
  return state


def _step(query, ledger, state):
  _, new, event = query.get_noised_result([tf.zeros([3])], state)
  with tf.control_dependencies([ledger.record_sample(event)]):
    return tf.nest.map_structure(tf.identity, new)


def _query(strategy, multiplier=2.0):
  return CorrelatedNoiseQuery(1.5, multiplier, strategy, [tf.zeros([3])])


def test_two_passes_accounted_from_the_strategy():
  strategy = mf.banded_strategy(20, 4)
  ledger = CorrelatedNoiseLedger(strategy, passes=2, min_separation=10)
  _run(_query(strategy), ledger, 20)
  ledger.record_participation(2, 10)
  r = ledger.to_dict()
  assert r["steps_run"] == 20 and r["inconsistent_steps"] == 0
  assert r["l2_norm_clip"] == 1.5 and r["noise_stddev"] == pytest.approx(3.0)
  mu = 2 * math.sqrt(2) / 2.0   # replace-one, sens sqrt(2), sigma 2
  assert ledger.epsilon(1e-5) == pytest.approx(
      pld_gaussian.gaussian_dp_epsilon(1e-5, mu), rel=1e-6)


def test_more_steps_than_built_for_is_refused():
  strategy = mf.tree_strategy(8)
  ledger = CorrelatedNoiseLedger(strategy)
  _run(_query(strategy), ledger, 9)
  ledger.record_participation(1, 0)
  with pytest.raises(PrivacyError, match="released 9 steps but the "
                                         "strategy was built for 8"):
    ledger.epsilon(1e-5)


def test_less_separation_than_promised_is_refused():
  strategy = mf.banded_strategy(20, 4)
  ledger = CorrelatedNoiseLedger(strategy, passes=2, min_separation=10)
  _run(_query(strategy), ledger, 20)
  ledger.record_participation(2, 10)
  ledger.record_participation(2, 7)
  with pytest.raises(PrivacyError, match="7 steps apart"):
    ledger.epsilon(1e-5)


def test_query_and_ledger_out_of_step_are_refused():
  strategy = mf.banded_strategy(20, 2)
  query = _query(strategy)
  ledger = CorrelatedNoiseLedger(strategy)
  _run(query, ledger, 3)
  # The query's state restored to step 0 while the ledger kept 3 steps.
  _run(query, ledger, 1, state=query.initial_global_state())
  ledger.record_participation(1, 0)
  with pytest.raises(PrivacyError, match="1 step\\(s\\)"):
    ledger.epsilon(1e-5)


def test_promise_the_strategy_cannot_keep_is_refused_at_once():
  with pytest.raises(PrivacyError, match="min_separation=3"):
    CorrelatedNoiseLedger(mf.banded_strategy(20, 4), passes=2,
                          min_separation=3)
  with pytest.raises(ValueError, match="min_separation"):
    CorrelatedNoiseLedger(mf.banded_strategy(20, 4), passes=2)


def test_checkpoint_keeps_the_record(tmp_path):
  strategy = mf.banded_strategy(10, 2)
  ledger = CorrelatedNoiseLedger(strategy)
  _run(_query(strategy), ledger, 4)
  path = tf.train.Checkpoint(ledger=ledger).write(str(tmp_path / "c"))
  fresh = CorrelatedNoiseLedger(strategy)
  tf.train.Checkpoint(ledger=fresh).read(path).assert_consumed()
  assert fresh.to_dict() == ledger.to_dict()


def test_a_record_restored_into_another_strategy_is_refused(tmp_path):
  """The file holds the strategy and promise the steps were run for: read
  into a ledger of another one, the record is refused, not accounted for
  the wrong strategy."""
  strategy = mf.banded_strategy(10, 2)
  ledger = CorrelatedNoiseLedger(strategy)
  _run(_query(strategy), ledger, 4)
  path = tf.train.Checkpoint(ledger=ledger).write(str(tmp_path / "c"))
  other = CorrelatedNoiseLedger(mf.banded_strategy(10, 3))
  tf.train.Checkpoint(ledger=other).read(path)
  with pytest.raises(PrivacyError, match="made for another strategy"):
    other.to_dict()
