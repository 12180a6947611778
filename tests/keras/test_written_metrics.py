"""A private model's write resets Keras's un-noised training metric
totals first (tests/privacy/test_what_is_written.py reads every format's
files for them)."""

import numpy as np
import pytest
import tensorflow as tf

import tf_dp
from tests.keras import helpers

KERAS = helpers.keras_modules()


def _metric_values(model):
  return [float(np.asarray(v)) for m in model.metrics for v in m.variables]


def _fitted(K, private):
  x, y = helpers.make_data("dense", 16)
  model = helpers.build_model(K, "dense")
  if private:
    model = tf_dp.keras.make_private(model)
  optimizer = K.optimizers.SGD(0.1)
  if private:
    optimizer = tf_dp.DPOptimizer(optimizer, l2_norm_clip=1.0,
                                  noise_multiplier=1.0, population_size=16)
  model.compile(optimizer=optimizer, metrics=["accuracy"],
                loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  model.fit(x, y, batch_size=8, epochs=1, verbose=0)
  return model


@pytest.mark.parametrize("K", KERAS)
def test_a_write_resets_the_training_metric_totals(K, tmp_path):
  model = _fitted(K, private=True)
  assert any(_metric_values(model))   # The epoch's loss sum and counts.
  tf.train.Checkpoint(model=model).write(str(tmp_path / "ck"))
  assert not any(_metric_values(model))
  model.evaluate(*helpers.make_data("dense", 16), verbose=0)
  assert any(_metric_values(model))
  model.save_weights(str(tmp_path / ("w.weights.h5")))
  assert not any(_metric_values(model))
  # The reset is the private model's: a plain model keeps its totals.
  plain = _fitted(K, private=False)
  tf.train.Checkpoint(model=plain).write(str(tmp_path / "plain"))
  assert any(_metric_values(plain))
