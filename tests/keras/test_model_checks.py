"""Frozen BatchNormalization trains; batch statistics in training never do.

A BatchNormalization with ``trainable=False`` (alone, or in a frozen
backbone called with ``training=False``) normalises with its moving
statistics: each example's output depends on that example alone, so the
model trains privately. A BatchNormalization that normalises with the
batch's statistics is refused by the privacy gate when the step is traced,
before any update, also when it is unfrozen after ``make_private``.
"""

import warnings

import numpy as np
import pytest

import tf_dp
from tests.keras import helpers

KERAS = helpers.keras_modules()


def _frozen_bn_mlp(K):
  init = K.initializers.GlorotUniform(seed=0)
  bn = K.layers.BatchNormalization(trainable=False)
  model = K.Sequential([K.layers.Input((6,)),
                        K.layers.Dense(5, activation="tanh",
                                       kernel_initializer=init),
                        bn, K.layers.Dense(3, kernel_initializer=init)])
  # Moving statistics far from (0, 1), so that using them shows.
  bn.set_weights([np.full(5, 1.5, "float32"), np.full(5, 0.2, "float32"),
                  np.full(5, 0.3, "float32"), np.full(5, 4.0, "float32")])
  return model, bn


@pytest.mark.parametrize("K", KERAS)
def test_a_frozen_batch_norm_trains_as_a_per_example_loop(K):
  model, bn = _frozen_bn_mlp(K)
  x, y = helpers.make_data("dense", 16)
  # One step of DP-SGD without noise from the same weights, by a Python
  # loop over examples (each example alone, BatchNormalization inference).
  expected = helpers.reference_update(model, x, y, clip=0.5, lr=0.1)
  statistics = [w.copy() for w in bn.get_weights()]
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)  # noise_multiplier=0.
    model = helpers.compile_dp(K, model, 16, l2_norm_clip=0.5,
                               noise_multiplier=0.0)
  model.fit(x, y, batch_size=16, epochs=1, verbose=0, shuffle=False)
  assert int(model.optimizer.ledger.sample_count) == 1
  for got, want in zip(model.trainable_variables, expected):
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)
  for got, want in zip(bn.get_weights(), statistics):
    np.testing.assert_array_equal(got, want)


def _backbone_and_head(K):
  L = K.layers  # pylint: disable=invalid-name
  inputs = K.Input((8, 8, 3))
  h = L.Conv2D(4, 3)(inputs)
  h = L.ReLU()(L.BatchNormalization()(h))
  base = K.Model(inputs, h, name="backbone")
  base.trainable = False
  inputs = K.Input((8, 8, 3))
  h = L.GlobalAveragePooling2D()(base(inputs, training=False))
  return K.Model(inputs, L.Dense(3)(h)), base


def _images(n=32):
  rng = np.random.default_rng(0)
  return (rng.normal(size=(n, 8, 8, 3)).astype("float32"),
          rng.integers(0, 3, n).astype("int32"))


@pytest.mark.parametrize("K", KERAS)
def test_a_frozen_backbone_with_a_trainable_head_trains(K):
  # The transfer-learning recipe: base.trainable = False, called with
  # training=False.
  model, base = _backbone_and_head(K)
  frozen = [w.copy() for w in base.get_weights()]
  model = helpers.compile_dp(K, model, 32)
  x, y = _images()
  model.fit(x, y, batch_size=8, verbose=0)
  assert int(model.optimizer.ledger.sample_count) == 4
  for got, want in zip(base.get_weights(), frozen):
    np.testing.assert_array_equal(got, want)  # Statistics too.
  # Fine-tuning, with a new DPOptimizer (its variables are the
  # backbone's too): the backbone unfrozen, its BatchNormalization kept
  # frozen (Keras 3 runs an unfrozen one in training mode despite
  # training=False: measured, one example's output moves when another
  # changes).
  base.trainable = True
  for layer in base.layers:
    if isinstance(layer, K.layers.BatchNormalization):
      layer.trainable = False
  model = helpers.compile_dp(K, model, 32)
  model.fit(x, y, batch_size=8, verbose=0)
  assert int(model.optimizer.ledger.sample_count) == 4
  assert not np.array_equal(base.get_weights()[0], frozen[0])
  np.testing.assert_array_equal(base.layers[2].moving_mean.numpy(),
                                frozen[4])


@pytest.mark.parametrize("K", KERAS)
def test_a_batch_norm_unfrozen_after_make_private_is_refused(K):
  model, bn = _frozen_bn_mlp(K)
  model = helpers.compile_dp(K, model, 16)
  bn.trainable = True  # Now it would normalise with the batch's statistics.
  model.compile(optimizer=model.optimizer, loss=model.loss)
  before = [w.numpy().copy() for w in model.weights]
  x, y = helpers.make_data("dense", 16)
  with pytest.raises(ValueError, match="combines examples"):
    model.fit(x, y, batch_size=8, verbose=0)
  assert int(model.optimizer.ledger.sample_count) == 0
  for got, want in zip(model.weights, before):
    np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("K", KERAS)
def test_a_trainable_batch_norm_is_still_refused(K):
  model = K.Sequential([K.layers.Input((4,)), K.layers.Dense(3),
                        K.layers.BatchNormalization(name="bn")])
  model = helpers.compile_dp(K, model, 16)
  x, y = helpers.make_data("dense", 16)
  before = helpers.weights(model)
  with pytest.raises(ValueError, match="'bn'.*combines examples.*"
                     "DPBatchNormalization.*trainable=False"):
    model.fit(x[:, :4], y, batch_size=8, verbose=0)
  for got, want in zip(helpers.weights(model), before):
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("K", KERAS)
def test_a_trainable_batch_norm_called_in_inference_mode(K):
  """TensorFlow's transfer-learning tutorial fine-tunes a base whose
  BatchNormalization stays trainable and is called with training=False.
  Keras 2 then normalises with the moving statistics: the gate proves it
  per example and it trains, like a loop over examples; Keras 3 normalises
  such a layer with the batch's statistics whatever training says: the
  gate refuses it, naming it, before any update."""
  L = K.layers  # pylint: disable=invalid-name
  init = K.initializers.GlorotUniform(seed=0)
  inputs = K.Input((6,))
  h = L.BatchNormalization(name="bn")(L.Dense(5, kernel_initializer=init)(
      inputs))
  base = K.Model(inputs, h)
  outer = K.Input((6,))
  model = K.Model(outer, L.Dense(3, kernel_initializer=init)(
      base(outer, training=False)))
  x, y = helpers.make_data("dense", 16)
  if hasattr(K, "ops"):  # Keras 3
    model = helpers.compile_dp(K, model, 16)
    with pytest.raises(ValueError, match="'bn'.*combines examples"):
      model.fit(x, y, batch_size=16, verbose=0)
    return
  expected = helpers.reference_update(model, x, y, clip=0.5, lr=0.1)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)  # noise_multiplier=0.
    model = helpers.compile_dp(K, model, 16, l2_norm_clip=0.5,
                               noise_multiplier=0.0)
  model.fit(x, y, batch_size=16, epochs=1, verbose=0)
  for got, want in zip(model.trainable_variables, expected):
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)
