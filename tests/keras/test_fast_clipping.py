"""The fast path (ghost norms, per-layer rules) against tf.vectorized_map."""

import numpy as np
import pytest
import tensorflow as tf

from tf_dp.dp_query import GaussianSumQuery
from tf_dp.dp_query import NestedQuery
from tf_dp.dp_query import QuantileAdaptiveClipSumQuery
from tf_dp.keras import losses as losses_lib
from tf_dp.keras import per_example
from tf_dp.keras.fast import clipped_sum
from tests.keras import helpers

KERAS = helpers.keras_modules()


def random_model(K, rng):
  """A random stack mixing fast-rule layers and fallback layers."""
  seed = int(rng.integers(1 << 30))
  init = lambda: K.initializers.GlorotUniform(seed=int(rng.integers(1 << 30)))
  conv = rng.integers(2)
  layers = [K.layers.Input((6, 6, 2) if conv else (6, 5))]
  if conv:
    layers += [K.layers.Conv2D(int(rng.integers(1, 4)), int(rng.integers(1, 4)),
                               strides=int(rng.integers(1, 3)),
                               padding=["same", "valid"][rng.integers(2)],
                               activation="relu", kernel_initializer=init()),
               K.layers.Flatten(), K.layers.Reshape((-1, 1)),
               K.layers.Conv1D(2, 3, activation="tanh", kernel_initializer=init())]
  layers += [K.layers.Dense(int(rng.integers(2, 6)), activation="tanh",
                            kernel_initializer=init()),
             K.layers.LayerNormalization(),
             K.layers.PReLU(alpha_initializer=K.initializers.RandomUniform(
                 0.1, 0.5, seed=seed)),  # no fast rule: per-layer fallback.
             K.layers.Flatten(),
             K.layers.Dense(4, kernel_initializer=init())]
  return K.Sequential(layers)


def clipped_sums_both_ways(K, model, query, x, y, microbatches=None):
  loss_fn = losses_lib.per_example_loss_fn(model)
  state = query.initial_global_state()

  @tf.function  # as in training: model.fit runs the step in a tf.function.
  def both(x, y):
    params = query.derive_sample_params(state)
    fast, _, _, _ = clipped_sum.clipped_batch_sum(model, loss_fn, x, y, None,
                                                  query, params, microbatches)
    grads, _, _ = per_example.record_gradients(model, loss_fn, x, y, None,
                                               microbatches)
    clipped = tf.vectorized_map(lambda g: query.preprocess_record(params, g),
                                grads)
    slow = tf.nest.map_structure(lambda t: tf.reduce_sum(t, 0), clipped)
    return fast, slow

  return both(x, y)


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("seed", range(4))
def test_random_models_fast_equals_vectorized(K, seed):
  rng = np.random.default_rng(seed)
  model = random_model(K, rng)
  model.compile(loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  shape = model.input_shape[1:]
  x = tf.constant(rng.normal(size=(6,) + shape).astype("float32"))
  y = tf.constant(rng.integers(0, 4, size=6).astype("int32"))
  query = GaussianSumQuery(0.3, 0.0)
  fast, slow = clipped_sums_both_ways(K, model, query, x, y)
  for a, b in zip(tf.nest.flatten(fast), tf.nest.flatten(slow)):
    np.testing.assert_allclose(a, b, atol=1e-5)
  plan = clipped_sum.clipping_plan(model)
  paths = {cls: path for _, cls, path in plan}
  assert "fast rule" in paths["Dense"]
  assert "local vectorized_map" in paths["PReLU"]


@pytest.mark.parametrize("K", KERAS)
def test_per_layer_and_adaptive_queries_and_microbatches(K):
  rng = np.random.default_rng(7)
  model = helpers.build_model(K, "conv")
  model.compile(loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  x, y = helpers.make_data("conv", 8)
  per_layer = NestedQuery([GaussianSumQuery(0.1, 0.0)
                           for _ in model.trainable_variables])
  adaptive = QuantileAdaptiveClipSumQuery(0.2, 0.0, 0.5, 0.1, 0.0, 8)
  for query, mb in [(per_layer, None), (adaptive, None), (per_layer, 4)]:
    fast, slow = clipped_sums_both_ways(K, model, query, tf.constant(x),
                                        tf.constant(y), mb)
    for a, b in zip(tf.nest.flatten(fast), tf.nest.flatten(slow)):
      np.testing.assert_allclose(a, b, atol=1e-5)
  del rng


@pytest.mark.parametrize("K", KERAS)
def test_non_finite_example_never_reaches_the_sum(K):
  model = helpers.build_model(K, "dense")
  model.compile(loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  x, y = helpers.make_data("dense", 4)
  x[1, 2] = np.nan
  x[3, 0] = np.inf
  query = GaussianSumQuery(0.5, 0.0)
  fast, slow = clipped_sums_both_ways(K, model, query, tf.constant(x),
                                      tf.constant(y))
  clean, _ = clipped_sums_both_ways(K, model, query, tf.constant(x[[0, 2]]),
                                    tf.constant(y[[0, 2]]))
  for a, b, c in zip(tf.nest.flatten(fast), tf.nest.flatten(slow),
                     tf.nest.flatten(clean)):
    assert np.all(np.isfinite(a)) and np.all(np.isfinite(b))
    np.testing.assert_allclose(a, c, atol=1e-6)
    np.testing.assert_allclose(b, c, atol=1e-6)


@pytest.mark.parametrize("K", KERAS)
def test_embedding_with_repeated_tokens(K):
  model = helpers.build_model(K, "embedding")
  model.compile(loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  x = tf.constant([[1, 1, 2, 1, 3], [4, 4, 4, 4, 4], [0, 1, 2, 3, 4]])
  y = tf.constant([0, 1, 2])
  fast, slow = clipped_sums_both_ways(K, model, GaussianSumQuery(0.05, 0.0),
                                      x, y)
  for a, b in zip(tf.nest.flatten(fast), tf.nest.flatten(slow)):
    np.testing.assert_allclose(a, b, atol=1e-6)


@pytest.mark.parametrize("K", KERAS)
def test_registry_accepts_user_rules(K):
  from tf_dp.keras.fast import rules  # pylint: disable=g-import-not-at-top

  class MyDense(K.layers.Dense):
    pass

  rules.register_rule(MyDense, rules.DenseRule())
  assert isinstance(rules.rule_for(MyDense(2)), rules.DenseRule)
