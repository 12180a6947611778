"""Training interrupted and resumed from a checkpoint keeps one ledger."""

import numpy as np
import pytest
import tensorflow as tf

import tf_dp
from tests.keras import helpers

KERAS = helpers.keras_modules()


def compiled(K):
  return helpers.compile_dp(K, helpers.build_model(K, "dense"), 64,
                            noise_multiplier=1.3)


@pytest.mark.parametrize("K", KERAS)
def test_resume_continues_the_same_ledger(K, tmp_path):
  x, y = helpers.make_data("dense", 64)
  first = compiled(K)
  first.fit(x, y, batch_size=16, epochs=2, verbose=0)
  path = tf.train.Checkpoint(model=first, optimizer=first.optimizer).save(
      str(tmp_path / "ckpt"))
  weights = [v.numpy() for v in first.trainable_variables]

  resumed = compiled(K)
  resumed.build((None, 6))
  status = tf.train.Checkpoint(model=resumed,
                               optimizer=resumed.optimizer).restore(path)
  resumed.fit(x, y, batch_size=16, epochs=1, verbose=0)
  status.assert_existing_objects_matched()
  ledger = resumed.optimizer.ledger.to_dict()
  assert len(ledger["samples"]) == 3 * 4  # 8 before, 4 after: none lost.
  eps, _ = tf_dp.analysis.compute_epsilon_from_ledger(ledger, 1e-5)
  uninterrupted = compiled(K)
  uninterrupted.fit(x, y, batch_size=16, epochs=3, verbose=0)
  expected, _ = tf_dp.analysis.compute_epsilon_from_ledger(
      uninterrupted.optimizer.ledger, 1e-5)
  assert eps == pytest.approx(expected, rel=1e-9)
  # The restored weights were used (training continued from them).
  assert not np.allclose(weights[0], resumed.trainable_variables[0].numpy())
  noise_seed = resumed.optimizer.dp_engine.global_state
  seed = tf.nest.flatten(noise_seed)[-1].numpy()
  assert seed[1] == 12  # the noise counter continued: no noise reused.
