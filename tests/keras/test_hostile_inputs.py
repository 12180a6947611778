"""Hostile and bad inputs: each gets a defined, tested behaviour.

The table of docs/privacy/reliability.md lists these cases.
"""

import math

import numpy as np
import pytest
import tensorflow as tf

import tf_dp
from tests.keras import helpers

KERAS = helpers.keras_modules()


compile_dp = helpers.compile_dp


def finite_weights(model):
  return all(np.all(np.isfinite(v.numpy())) for v in model.trainable_variables)


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_features_never_reach_the_weights(K, bad):
  x, y = helpers.make_data("dense", 32)
  x[3, 1] = bad
  x[17, :] = bad
  model = compile_dp(K, helpers.build_model(K, "dense"), 32)
  model.fit(x, y, batch_size=16, epochs=2, verbose=0)
  assert finite_weights(model)
  assert len(model.optimizer.ledger.to_dict()["samples"]) == 4


@pytest.mark.parametrize("K", KERAS)
def test_empty_poisson_sample_releases_only_noise(K):
  x, y = helpers.make_data("dense", 8)
  model = compile_dp(K, helpers.build_model(K, "dense"), 8,
                     sampling="poisson", sampling_probability=0.5)
  before = [v.numpy() for v in model.trainable_variables]
  weights = np.zeros(8, np.float32)  # Poisson drew nobody: all padding.
  # A Poisson lot comes as a dataset of (x, y, weight), as the sampler's.
  empty_lot = tf_dp.data.declare_sampling(
      tf.data.Dataset.from_tensor_slices((x, y, weights)).batch(8),
      "poisson", 0.5)
  model.fit(empty_lot, epochs=1, verbose=0)
  after = [v.numpy() for v in model.trainable_variables]
  assert finite_weights(model) and not np.allclose(before[0], after[0])
  assert len(model.optimizer.ledger.to_dict()["samples"]) == 1


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("batch", [1, 4096])
def test_batch_size_one_and_huge(K, batch):
  x, y = helpers.make_data("dense", batch)
  model = compile_dp(K, helpers.build_model(K, "dense"), batch)
  model.fit(x, y, batch_size=batch, epochs=1, verbose=0)
  assert finite_weights(model)
  assert model.optimizer.ledger.to_dict()["samples"][0][
      "sampling_probability"] == pytest.approx(1.0)


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("dtype", ["int32", "float16", "float64"])
def test_integer_and_other_float_inputs_are_cast(K, dtype):
  x, y = helpers.make_data("dense", 16)
  x = (x * 3).astype(dtype)
  model = compile_dp(K, helpers.build_model(K, "dense"), 16)
  model.fit(x, y, batch_size=8, epochs=1, verbose=0)
  assert finite_weights(model)


@pytest.mark.parametrize("K", KERAS)
def test_labels_out_of_range_are_an_error_and_change_nothing(K):
  x, y = helpers.make_data("dense", 8)
  y[2] = 7  # 3 classes
  model = compile_dp(K, helpers.build_model(K, "dense"), 8)
  before = [v.numpy() for v in model.trainable_variables]
  with pytest.raises(Exception):
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
  for a, v in zip(before, model.trainable_variables):
    np.testing.assert_array_equal(a, v.numpy())


@pytest.mark.parametrize("K", KERAS)
def test_ragged_labels_are_refused_with_the_fix(K):
  """Ragged inputs train (tests/keras/test_ragged_inputs.py); labels must
  be dense."""
  model = compile_dp(K, helpers.build_model(K, "dense"), 4)
  x = tf.constant(helpers.make_data("dense", 4)[0])
  y = tf.ragged.constant([[0], [1, 2], [2], [0]])
  with pytest.raises(ValueError, match="RaggedTensor labels.*Pad the labels"):
    model.train_step((x, y))


@pytest.mark.parametrize("K", KERAS)
def test_model_without_trainable_variables_is_refused(K):
  model = K.Sequential([K.layers.Input((4,)), K.layers.Flatten()])
  with pytest.raises(ValueError, match="no trainable variables"):
    tf_dp.keras.make_private(model)


@pytest.mark.parametrize("K", KERAS)
def test_mixed_float16_is_refused_with_the_fix(K):
  K.mixed_precision.set_global_policy("mixed_float16")
  try:
    model = helpers.build_model(K, "dense")
  finally:
    K.mixed_precision.set_global_policy("float32")
  with pytest.raises(ValueError, match="mixed_float16.*loss scaling.*"
                     "set_global_policy\\('mixed_bfloat16'\\)"):
    tf_dp.keras.make_private(model)


@pytest.mark.parametrize("K", KERAS)
def test_zero_noise_trains_but_the_ledger_says_infinite_epsilon(K):
  x, y = helpers.make_data("dense", 16)
  with pytest.warns(UserWarning, match="epsilon = inf"):
    model = compile_dp(K, helpers.build_model(K, "dense"), 16,
                       noise_multiplier=0.0)
  model.fit(x, y, batch_size=8, epochs=1, verbose=0)
  eps, _ = tf_dp.analysis.compute_epsilon_from_ledger(model.optimizer.ledger,
                                                      1e-5)
  assert eps == math.inf


def test_zero_clip_is_refused():
  K = KERAS[0].values[0]
  with pytest.raises(ValueError, match="l2_norm_clip"):
    tf_dp.DPOptimizer(K.optimizers.SGD(0.1), l2_norm_clip=0.0,
                      noise_multiplier=1.0, population_size=10)
