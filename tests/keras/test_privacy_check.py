"""``check_privacy``: the privacy gate's verdict on a model, ahead of training.

Layers that draw at random (dropout, noise, augmentation) keep examples
apart and take the fast path; layers that mix examples (a batch mean,
BatchNormalization in training mode, a subclass of it) are named, with or
without a random layer beside them, whatever the batch holds: the verdict
reads the traced step, not the data.
"""

import numpy as np
import pytest
import tensorflow as tf

import tf_dp
from tests.keras import helpers
from tf_dp.errors import UnsupportedModelError

KERAS = helpers.keras_modules()


def _compiled(K, model, n=32):
  model.compile(
      optimizer=tf_dp.DPOptimizer(K.optimizers.SGD(0.1), l2_norm_clip=1.0,
                                  noise_multiplier=1.0, population_size=n),
      loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  return model


def _images(n=32, seed=0):
  rng = np.random.default_rng(seed)
  return (rng.normal(size=(n, 8, 8, 3)).astype("float32"),
          rng.integers(0, 3, n).astype("int32"))


def _random_layers(K, kind):
  """(layers before the convolution, layers after it) for ``kind``."""
  L = K.layers  # pylint: disable=invalid-name
  return {
      "dropout": ([], [L.Dropout(0.5)]),
      "spatial_dropout": ([], [L.SpatialDropout2D(0.3)]),
      "dropout_noise_shape": ([], [L.Dropout(0.5, noise_shape=(None, 1, 1,
                                                                 2))]),
      "gaussian_noise": ([], [L.GaussianNoise(0.5)]),
      "random_flip": ([L.RandomFlip("horizontal")], []),
      "random_translation": ([L.RandomTranslation(0.2, 0.2)], []),
  }[kind]


RANDOM_KINDS = ["dropout", "spatial_dropout", "dropout_noise_shape",
                "gaussian_noise", "random_flip", "random_translation"]


def _cnn(K, kind):
  before, after = _random_layers(K, kind)
  init = K.initializers.GlorotUniform(seed=0)
  return K.Sequential(
      [K.Input((8, 8, 3))] + before +
      [K.layers.Conv2D(2, 3, activation="relu", kernel_initializer=init)] +
      after + [K.layers.Flatten(), K.layers.Dense(3, kernel_initializer=init)])


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("kind", RANDOM_KINDS)
def test_random_layers_take_the_fast_path(K, kind):
  x, y = _images(8)
  model = _compiled(K, tf_dp.keras.make_private(_cnn(K, kind)))
  assert tf_dp.keras.check_privacy(model, x, y) == ("fast", None)


@pytest.mark.parametrize("K", KERAS)
def test_a_model_with_every_random_layer_trains(K):
  L = K.layers  # pylint: disable=invalid-name
  model = K.Sequential([
      K.Input((8, 8, 3)), L.RandomFlip("horizontal"),
      L.RandomTranslation(0.2, 0.2), L.Conv2D(4, 3, activation="relu"),
      L.SpatialDropout2D(0.3), L.Dropout(0.5, noise_shape=(None, 1, 1, 4)),
      L.GaussianNoise(0.5), L.Flatten(), L.Dropout(0.5), L.Dense(3)])
  model = _compiled(K, tf_dp.keras.make_private(model))
  x, y = _images()
  model.fit(x, y, batch_size=8, verbose=0)
  assert int(model.optimizer.ledger.sample_count) == 4


class _Mixers:
  """Layers that mix examples, for a flavour ``K``."""

  def __init__(self, K):

    class BatchMean(K.layers.Layer):

      def call(self, inputs):
        return inputs - tf.reduce_mean(inputs, 0, keepdims=True)

    class MyNorm(K.layers.BatchNormalization):
      pass

    self.classes = {"batch_mean": BatchMean,
                    "batch_norm": K.layers.BatchNormalization,
                    "batch_norm_subclass": MyNorm}


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("mixer", ["batch_mean", "batch_norm",
                                   "batch_norm_subclass"])
@pytest.mark.parametrize("random_layers", [False, True])
def test_a_layer_that_mixes_examples_is_named(K, mixer, random_layers):
  # Not converted (make_private refuses BatchNormalization by its class
  # first): the gate alone must find every mixer, random layers or not.
  before, after = ([K.layers.RandomFlip()], [K.layers.Dropout(0.5)]) if (
      random_layers) else ([], [])
  layer = _Mixers(K).classes[mixer](name="the_mixer")
  model = K.Sequential(
      [K.Input((8, 8, 3))] + before + [K.layers.Conv2D(2, 3), layer] +
      after + [K.layers.Flatten(), K.layers.Dense(3)])
  model = _compiled(K, model)
  x, y = _images(8)
  with pytest.raises(UnsupportedModelError,
                     match=f"'the_mixer' \\({type(layer).__name__}\\) "
                     "combines examples"):
    tf_dp.keras.check_privacy(model, x, y)


@pytest.mark.parametrize("K", KERAS)
def test_the_check_changes_nothing(K):
  """It traces, never runs: the moving statistics and the augmentation's
  random state are what they were."""
  model = K.Sequential([K.Input((8, 8, 3)), K.layers.RandomFlip(),
                        K.layers.Conv2D(2, 3), K.layers.BatchNormalization(),
                        K.layers.Flatten(), K.layers.Dense(3)])
  model = _compiled(K, model)
  x, y = _images(8)
  before = [v.numpy().copy() for v in model.variables]
  with pytest.raises(UnsupportedModelError):
    tf_dp.keras.check_privacy(model, x, y)
  for a, b in zip(before, [v.numpy() for v in model.variables]):
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("rows", [[0, 1, 2, 3, 0, 4], [0] * 5],
                         ids=["an_example_repeated", "one_example_only"])
def test_repeated_examples_do_not_hide_a_mixer(K, rows):
  """A batch whose examples repeat (all of them, even) hid a batch-mean
  layer from the numerical check; the traced step does not depend on it."""
  layer = _Mixers(K).classes["batch_mean"](name="the_mixer")
  model = _compiled(K, K.Sequential(
      [K.Input((8, 8, 3)), K.layers.Conv2D(2, 3), layer,
       K.layers.Flatten(), K.layers.Dense(3)]))
  x, y = _images(8)
  with pytest.raises(UnsupportedModelError, match="the_mixer"):
    tf_dp.keras.check_privacy(model, x[rows], y[rows])


@pytest.mark.parametrize("K", KERAS)
def test_an_operation_the_gate_does_not_know_takes_the_exact_path(K):
  """An operation off the allowlist cannot be proven to keep examples
  apart: the step takes the exact path, and the verdict names it."""

  class Dawson(K.layers.Layer):

    def call(self, inputs):
      return tf.math.special.dawsn(inputs)

  model = K.Sequential([K.Input((5,)), Dawson(), K.layers.Dense(3)])
  model = _compiled(K, tf_dp.keras.make_private(model))
  verdict = tf_dp.keras.check_privacy(
      model, np.zeros((4, 5), "float32"), np.zeros(4, "int32"))
  assert verdict.path == "exact"
  assert "Dawsn is not known to keep examples apart" in verdict.reason
