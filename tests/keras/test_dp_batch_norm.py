"""Tests of DPBatchNormalization: private batch statistics, outputs that
do not depend on the batch, and the refusal of Keras' BatchNormalization
that names it."""

import numpy as np
import pytest
import tensorflow as tf

import tf_dp
from tf_dp.keras import backend
from tests.keras import helpers


KERAS = helpers.keras_modules()


def dp_bn_layer_class(K):
  if K is backend.keras3_module():
    from tf_dp.keras import layers  # pylint: disable=g-import-not-at-top
  else:
    from tf_dp.keras import layers_keras2 as layers  # pylint: disable=g-import-not-at-top
  return layers.DPBatchNormalization


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("num_microbatches", [None, 4])
def test_dp_batch_norm_statistics_move_to_the_batch_statistics(
    K, num_microbatches):
  # Each example's statistics are a record of the batch-norm part, also
  # when the gradients' records are microbatches of 4 examples: the noised
  # sums are divided by the 16 examples, not by the 4 microbatches.
  rng = np.random.default_rng(0)
  x = rng.normal(2.0, 3.0, size=(16, 6)).astype("float32")
  y = rng.integers(0, 3, 16).astype("int32")
  layer = dp_bn_layer_class(K)(l2_norm_clip=1e4, noise_multiplier=0.0,
                                momentum=0.9)
  first = K.layers.Dense(4, kernel_initializer=K.initializers.GlorotUniform(1))
  model = K.Sequential([K.layers.Input((6,)), first, layer, K.layers.Dense(3)])
  inputs = first(tf.constant(x)).numpy()  # the BN layer's inputs at step 0.
  model = tf_dp.keras.make_private(model)
  with pytest.warns(UserWarning):
    model.compile(optimizer=tf_dp.DPOptimizer(
        K.optimizers.SGD(0.0), l2_norm_clip=1.0, noise_multiplier=0.0,
        population_size=16, num_microbatches=num_microbatches),
        loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  model.fit(x, y, batch_size=16, epochs=1, verbose=0)
  np.testing.assert_allclose(layer.moving_mean.numpy(),
                             0.1 * inputs.mean(0), rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(layer.moving_variance.numpy(),
                             0.9 + 0.1 * inputs.var(0), rtol=1e-4)
  queries = model.optimizer.ledger.to_dict()["samples"][0]["sum_queries"]
  assert sorted(q["l2_norm_clip"] for q in queries) == [1.0, 1e4]


@pytest.mark.parametrize("K", KERAS)
def test_dp_batch_norm_output_does_not_depend_on_the_batch(K):
  layer = dp_bn_layer_class(K)()
  x = tf.random.normal([5, 3])
  batch_out = layer(x, training=True).numpy()
  single = np.concatenate([layer(x[i:i + 1], training=True).numpy()
                           for i in range(5)])
  np.testing.assert_allclose(batch_out, single, rtol=1e-6)


@pytest.mark.parametrize("K", KERAS)
def test_batch_norm_refusal_names_the_dp_layer(K):
  model = K.Sequential([K.layers.Input((4,)), K.layers.BatchNormalization(),
                        K.layers.Dense(2)])
  model = helpers.compile_dp(K, model, 8)
  with pytest.raises(ValueError, match="DPBatchNormalization"):
    model.fit(np.ones((8, 4), "float32"), np.zeros(8, "int32"), verbose=0)


@pytest.mark.parametrize("K", KERAS)
def test_dp_batch_norm_needs_the_fast_path(K):
  x, y = helpers.make_data("dense", 8)
  model = tf_dp.keras.make_private(K.Sequential([
      K.layers.Input((6,)), K.layers.Dense(4), dp_bn_layer_class(K)(),
      K.layers.Dense(3)]))
  model.compile(optimizer=tf_dp.DPOptimizer(
      K.optimizers.SGD(0.1), 1.0, 1.0, population_size=8,
      per_example_method="vectorized"),
      loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  with pytest.raises(Exception, match="fast clipping path"):
    model.fit(x, y, batch_size=8, verbose=0)


@pytest.mark.parametrize("K", KERAS)
def test_frozen_dp_batch_norm_is_refused_by_name(K):
  x, y = helpers.make_data("dense", 8)
  layer = dp_bn_layer_class(K)(name="frozen_bn")
  model = tf_dp.keras.make_private(K.Sequential([
      K.layers.Input((6,)), K.layers.Dense(4), layer, K.layers.Dense(3)]))
  layer.trainable = False
  model.compile(optimizer=tf_dp.DPOptimizer(
      K.optimizers.SGD(0.1), 1.0, 1.0, population_size=8),
      loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  with pytest.raises(tf_dp.errors.UnsupportedModelError,
                     match="'frozen_bn' has no tap"):
    model.fit(x, y, batch_size=8, verbose=0)
  assert model.optimizer.ledger.to_dict()["samples"] == []
