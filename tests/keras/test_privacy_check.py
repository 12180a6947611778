"""The privacy self-check: random layers pass, layers that mix examples do not.

``check_privacy`` compares batched passes of the model with each other and
with the fast clipped sum. Layers that draw at random (dropout, noise,
augmentation) must draw the same in the runs compared, so that only what
another example does can change a result; layers that mix examples (a batch
mean, BatchNormalization in training mode, a subclass of it) must still be
named, with or without a random layer beside them.
"""

import numpy as np
import pytest
import tensorflow as tf

import tf_dp
from tests.keras import helpers
from tf_dp.keras import privacy_check

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
def test_random_layers_pass_the_check(K, kind):
  x, y = _images(8)
  model = _compiled(K, tf_dp.keras.make_private(_cnn(K, kind)))
  # The check itself raises on any failure (fit only logs one that is not
  # a PrivacyCheckError).
  tf_dp.keras.check_privacy(model, x, y)


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
  assert model._tf_dp_checked  # pylint: disable=protected-access
  assert int(model.optimizer.ledger.sample_count) == 4


def test_the_fast_path_comparison_still_finds_a_wrong_sum(monkeypatch):
  # Dropout draws the same masks in the reference and the fast path, so a
  # fast sum off by 1 % (100x the tolerance) in one variable is found.
  K = helpers.keras_modules()[0].values[0]
  model = _compiled(K, tf_dp.keras.make_private(_cnn(K, "dropout")))
  true_sum = privacy_check.fast_clipping.clipped_batch_sum

  def wrong_sum(*args, **kwargs):
    out = true_sum(*args, **kwargs)
    return ([out[0][0] * 1.01] + list(out[0][1:]),) + tuple(out[1:])

  monkeypatch.setattr(privacy_check.fast_clipping, "clipped_batch_sum",
                      wrong_sum)
  x, y = _images(8)
  kernel = model.trainable_variables[0]
  # Its full path on Keras 3 (sequential/conv2d/kernel), its unique name on
  # Keras 2 (conv2d/kernel:0).
  path = getattr(kernel, "path", None) or kernel.name
  assert "conv2d" in path and "/kernel" in path
  with pytest.raises(privacy_check.PrivacyCheckError,
                     match=f"fast clipped sum of variable {path} \\(layer "
                     f"'conv2d[_0-9]*', Conv2D\\) differs"):
    tf_dp.keras.check_privacy(model, x, y)


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
  # first): the check alone must find every mixer, random layers or not.
  before, after = ([K.layers.RandomFlip()], [K.layers.Dropout(0.5)]) if (
      random_layers) else ([], [])
  layer = _Mixers(K).classes[mixer](name="the_mixer")
  model = K.Sequential(
      [K.Input((8, 8, 3))] + before + [K.layers.Conv2D(2, 3), layer] +
      after + [K.layers.Flatten(), K.layers.Dense(3)])
  model = _compiled(K, model)
  x, y = _images(8)
  with pytest.raises(privacy_check.PrivacyCheckError,
                     match=f"'the_mixer' \\({type(layer).__name__}\\) "
                     "mixes examples"):
    tf_dp.keras.check_privacy(model, x, y)


@pytest.mark.parametrize("K", KERAS)
def test_the_check_leaves_the_model_as_it_found_it(K):
  # BatchNormalization's moving statistics and the augmentation's random
  # state are what they were before the check.
  model = K.Sequential([K.Input((8, 8, 3)), K.layers.RandomFlip(),
                        K.layers.Conv2D(2, 3), K.layers.BatchNormalization(),
                        K.layers.Flatten(), K.layers.Dense(3)])
  model = _compiled(K, model)
  x, y = _images(8)
  before = [v.numpy().copy() for v in model.non_trainable_variables]
  with pytest.raises(privacy_check.PrivacyCheckError):
    tf_dp.keras.check_privacy(model, x, y)
  after = [v.numpy() for v in model.non_trainable_variables]
  assert len(before) >= 2
  for a, b in zip(before, after):
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("K", KERAS)
def test_the_fast_path_comparison_finds_norms_that_are_too_small(
    K, monkeypatch):
  # A fast path that halves every example's norm: at the binding clip (the
  # median norm) the examples above it come out with norm 2C instead of C;
  # the float64 reference from the jacobian's rows must see it.
  model = _compiled(K, tf_dp.keras.make_private(_cnn(K, "dropout")))
  query_class = privacy_check.GaussianSumQuery
  true_scales = query_class.record_scales

  def scales_of_half_norms(self, params, sq_norms):
    return true_scales(self, params,
                       tf.nest.map_structure(lambda s: s / 4.0, sq_norms))

  monkeypatch.setattr(query_class, "record_scales", scales_of_half_norms)
  x, y = _images(8)
  with pytest.raises(privacy_check.PrivacyCheckError,
                     match="fast clipped sum of variable .* differs"):
    tf_dp.keras.check_privacy(model, x, y)


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("rows", [[0, 1, 2, 3, 0, 4], [0, 0, 1, 2]],
                         ids=["row_4_is_row_0", "row_1_is_row_0"])
def test_an_example_repeated_in_the_batch_does_not_hide_a_mixer(K, rows):
  """The neighbour replaces example 0 by row 4 (row 1 in a batch of 4):
  where that row had example 0's inputs, the neighbour equalled the batch
  and a batch-mean layer passed. The replacement is the next row with
  different inputs."""
  layer = _Mixers(K).classes["batch_mean"](name="the_mixer")
  model = _compiled(K, K.Sequential(
      [K.Input((8, 8, 3)), K.layers.Conv2D(2, 3), layer,
       K.layers.Flatten(), K.layers.Dense(3)]))
  x, y = _images(8)
  with pytest.raises(privacy_check.PrivacyCheckError, match="the_mixer"):
    tf_dp.keras.check_privacy(model, x[rows], y[rows])


def test_a_batch_of_one_example_repeated_is_refused():
  """Copies of one example: no neighbour differs from the batch."""
  K = KERAS[0].values[0]
  model = _compiled(K, _cnn(K, "dropout"))
  x, y = _images(1)
  with pytest.raises(ValueError, match="different inputs; all 5 examples"):
    tf_dp.keras.check_privacy(model, x[[0] * 5], y[[0] * 5])


@pytest.mark.parametrize("K", KERAS)
def test_an_example_with_a_zero_gradient_passes_without_numpy_warnings(K):
  """An example of all-zero features through a Dense without bias has a
  zero gradient: the reference's scale of that example is 1 (clip / norm
  would overflow to inf under the huge clip of the check's second pass,
  a RuntimeWarning on the user's first fit)."""
  x, y = helpers.make_data("dense", 8)
  x[1] = 0.0
  model = K.Sequential([K.Input((6,)), K.layers.Dense(
      3, use_bias=False,
      kernel_initializer=K.initializers.GlorotUniform(seed=0))])
  model = _compiled(K, tf_dp.keras.make_private(model))
  with np.errstate(over="raise", divide="raise"):
    tf_dp.keras.check_privacy(model, x, y)
