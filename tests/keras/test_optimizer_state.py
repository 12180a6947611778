"""What a DP optimizer saves besides the wrapped optimizer: its ledger."""

import numpy as np
import pytest

import tf_dp
from tf_dp.errors import LedgerFormatError
from tf_dp.keras import optimizer_state
from tests.keras import helpers

# The saved arrays' names, in the order .h5 files keep: a file format.
SAVED_NAMES = [
    "ledger_population_size", "ledger_sampling_probability",
    "ledger_examples_per_record", "ledger_sampling_code",
    "ledger_sample_count", "ledger_query_count", "ledger_dropped_samples",
    "ledger_samples", "ledger_queries"]


def _trained(K, max_lots=100):
  x, y = helpers.make_data("dense", 30)
  model = helpers.compile_dp(K, helpers.build_model(K, "dense"), 30,
                             max_lots=max_lots)
  model.fit(x, y, batch_size=10, epochs=1, verbose=0)
  return model


@pytest.mark.parametrize("K", helpers.keras_modules())
def test_saved_names_and_round_trip(K):
  model = _trained(K)
  state = model.optimizer.dp_state()
  assert list(state) == SAVED_NAMES
  assert list(optimizer_state.LEDGER_KEYS) == SAVED_NAMES
  assert int(state["ledger_sample_count"]) == 3
  assert len(state["ledger_samples"]) == 3  # The rows written, no more.
  ledger = model.optimizer.ledger
  assert float(state["ledger_sampling_probability"]) == float(
      ledger.sampling_probability.numpy())
  fresh = tf_dp.PrivacyLedger(5, 0.5, max_samples=10)
  optimizer_state.restore_ledger(fresh, state)
  assert fresh.to_dict() == ledger.to_dict()
  assert float(fresh.sampling_probability.numpy()) == float(
      ledger.sampling_probability.numpy())
  for key, value in optimizer_state.export_state(
      model.optimizer.dp_engine).items():
    np.testing.assert_array_equal(value, state[key])


@pytest.mark.parametrize("K", helpers.keras_modules()[:1])
def test_a_ledger_too_small_for_the_saved_one_names_max_lots(K):
  state = _trained(K).optimizer.dp_state()
  small = tf_dp.PrivacyLedger(5, 0.5, max_samples=2)
  with pytest.raises(ValueError, match="max_lots"):
    optimizer_state.restore_ledger(small, state)


@pytest.mark.parametrize("K", helpers.keras_modules()[:1])
def test_check_ledger_covers_counts_written_and_dropped_samples(K):
  ledger = _trained(K).optimizer.ledger
  optimizer_state.check_ledger_covers(3, ledger)
  with pytest.raises(ValueError, match="records only 3"):
    optimizer_state.check_ledger_covers(4, ledger)


@pytest.mark.parametrize("K", helpers.keras_modules()[:1])
def test_part_of_a_saved_ledger_is_refused(K):
  """A saved state missing one of the ledger's arrays (a Keras 2 '.h5' file
  with fewer optimizer weights, a '.keras' file with a dataset removed) is
  refused with the missing names, never loaded as a shorter ledger."""
  state = _trained(K).optimizer.dp_state()
  for name in SAVED_NAMES:
    partial = {k: v for k, v in state.items() if k != name}
    fresh = tf_dp.PrivacyLedger(5, 0.5, max_samples=10)
    with pytest.raises(LedgerFormatError, match=f"tf_dp_{name}.*missing"):
      optimizer_state.restore_ledger(fresh, partial)
    assert int(fresh.sample_count.numpy()) == 0
