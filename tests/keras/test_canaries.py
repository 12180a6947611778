"""Dirac canaries in a Keras model: a canary row's gradient is exactly
gradient_norm on its own audit coordinate and zero elsewhere, an example's
is the model's own, and one DP step clips each canary to exactly C and
leaves the examples' update as it is without canaries; in user-level
training each canary is a user of its own."""

import numpy as np
import pytest
import tensorflow as tf

import tf_dp
from tf_dp.data.canaries import MixedData
from tf_dp.keras import canaries as kc
from tests.keras import helpers

KERAS = helpers.keras_modules()


def small_model(K, seed=0):
  init = K.initializers.GlorotUniform(seed=seed)
  return K.Sequential([K.layers.Input((6,)),
                       K.layers.Dense(4, activation="tanh",
                                      kernel_initializer=init),
                       K.layers.Dense(3, kernel_initializer=init)])


def row_gradients(model, loss, x, ids, y):
  """Gradients of each row's loss alone, per trainable variable."""
  out = []
  for i in range(len(y)):
    with tf.GradientTape() as tape:
      pred = model([x[i:i + 1], ids[i:i + 1]]) if ids is not None else (
          model(x[i:i + 1]))
      value = loss(y[i:i + 1], pred)
    out.append([None if g is None else tf.convert_to_tensor(g).numpy()
                for g in tape.gradient(value, model.trainable_variables)])
  return out


@pytest.mark.parametrize("K", KERAS)
def test_a_canary_row_has_a_dirac_gradient_and_an_example_its_own(K):
  model = small_model(K)
  canaries = tf_dp.data.dirac_canaries(5, gradient_norm=7.0, seed=0)
  audited = tf_dp.keras.with_dirac_canaries(model, canaries)
  rng = np.random.default_rng(0)
  x = rng.normal(size=(3, 6)).astype(np.float32)
  x[1] = 0.0
  ids = np.array([0, 3, 0], np.int32)  # Row 1 is canary 2.
  y = np.array([2, 0, 1], np.int32)
  # The forward pass is the model's.
  np.testing.assert_allclose(audited([x, ids]).numpy(), model(x).numpy(),
                             rtol=1e-6)
  loss = K.losses.SparseCategoricalCrossentropy(from_logits=True)
  grads = row_gradients(audited, loss, x, ids, y)
  table = [i for i, v in enumerate(audited.trainable_variables)
           if v.shape == (6, 1)]
  assert len(table) == 1 and len(audited.trainable_variables) == 5
  (t,) = table
  expected = np.zeros((6, 1), np.float32)
  expected[3] = 7.0
  np.testing.assert_array_equal(grads[1][t], expected)
  for i, g in enumerate(grads[1]):
    if i != t:
      np.testing.assert_array_equal(g, 0.0)
  own = row_gradients(model, loss, x, None, y)
  for row in (0, 2):
    assert not np.any(grads[row][t])
    for g, reference in zip([g for i, g in enumerate(grads[row]) if i != t],
                            own[row]):
      np.testing.assert_allclose(g, reference, rtol=1e-6, atol=1e-7)


def one_poisson_step(K, model, x, y, population_size, noise=0.0):
  """One DP-SGD step (SGD, learning rate 1) on the whole of ``(x, y)`` as
  one Poisson lot with q = 1, clip 1."""
  model = tf_dp.keras.make_private(model)
  optimizer = tf_dp.DPOptimizer(
      K.optimizers.SGD(1.0), l2_norm_clip=1.0, noise_multiplier=noise,
      population_size=population_size, sampling="poisson",
      sampling_probability=1.0, max_lots=4)
  model.compile(optimizer=optimizer,
                loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  rows = len(y)
  data = tf_dp.data.declare_sampling(
      tf.data.Dataset.from_tensor_slices((x, y)).batch(rows), "poisson", 1.0)
  model.fit(data, epochs=1, verbose=0)
  return optimizer


@pytest.mark.filterwarnings("ignore:noise_multiplier=0")
@pytest.mark.parametrize("K", KERAS[:1])  # Keras 2: the gradients above.
def test_one_dp_step_clips_each_canary_and_leaves_the_examples_alone(K):
  rng = np.random.default_rng(1)
  x = rng.normal(size=(40, 6)).astype(np.float32)
  y = rng.integers(0, 3, 40).astype(np.int32)
  canaries = tf_dp.data.dirac_canaries(12, seed=2)  # Norm 1000 >> C = 1.
  mixed = tf_dp.data.mix_canaries(x, y, canaries)
  n = mixed.population_size
  model = small_model(K)
  audited = tf_dp.keras.with_dirac_canaries(model, canaries)
  one_poisson_step(K, audited, mixed.x, mixed.y, n)
  # Each included canary moved its entry by C / (q n), clipped from 1000.
  scores = kc.dirac_canary_scores(audited, canaries)
  np.testing.assert_allclose(scores, canaries.included / n, rtol=1e-6)
  assert tf_dp.keras.canary_scores(audited, canaries) == pytest.approx(
      scores)
  # The model's own update is that of the examples alone (same q n).
  reference = small_model(K)
  one_poisson_step(K, reference, x, y, n)
  for got, want in zip(model.get_weights(), reference.get_weights()):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("K", KERAS[:1])
def test_scores_need_the_audited_model_and_its_canaries(K):
  model = small_model(K)
  canaries = tf_dp.data.dirac_canaries(5, seed=0)
  with pytest.raises(ValueError, match="has no Dirac canaries"):
    kc.dirac_canary_scores(model, canaries)
  audited = tf_dp.keras.with_dirac_canaries(model, canaries)
  with pytest.raises(ValueError, match="holds 5 canaries, not the 6"):
    kc.dirac_canary_scores(audited, tf_dp.data.dirac_canaries(6))
  x, y = np.zeros((3, 6), np.float32), np.zeros(3, np.int32)
  with pytest.raises(ValueError, match="takes canaries of kind"):
    tf_dp.keras.with_dirac_canaries(
        model, tf_dp.data.mislabeled_canaries(x, y, 2, num_classes=3))
  with pytest.raises(TypeError, match="canaries must be tf_dp.data.Canaries"):
    tf_dp.keras.with_dirac_canaries(model, MixedData(x, y, 3))
  assert kc.has_dirac_canaries(audited) and not kc.has_dirac_canaries(model)
  with pytest.raises(ValueError, match="Score mislabeled canaries on the "
                     "model inside"):
    tf_dp.keras.canary_scores(audited, tf_dp.data.mislabeled_canaries(
        x, y, 2, num_classes=3))


@pytest.mark.parametrize("K", KERAS[:1])
def test_a_model_without_one_input_is_refused(K):
  first, second = K.Input((2,)), K.Input((2,))
  model = K.Model([first, second], K.layers.Add()([first, second]))
  with pytest.raises(ValueError, match="has 2 inputs and 1 outputs"):
    tf_dp.keras.with_dirac_canaries(model, tf_dp.data.dirac_canaries(3))


@pytest.mark.filterwarnings("ignore:noise_multiplier=0")
@pytest.mark.parametrize("K", KERAS[:1])
def test_a_canary_is_a_user_of_its_own_in_user_level_training(K):
  rng = np.random.default_rng(3)
  x = rng.normal(size=(40, 6)).astype(np.float32)
  y = rng.integers(0, 3, 40).astype(np.int32)
  canaries = tf_dp.data.dirac_canaries(12, seed=4)
  mixed = tf_dp.data.mix_canaries(x, y, canaries,
                                  user_ids=np.arange(40) // 4)
  n = mixed.population_size  # 10 users and the included canaries.
  assert n == 10 + canaries.num_included
  audited = tf_dp.keras.make_private(
      tf_dp.keras.with_dirac_canaries(small_model(K), canaries))
  audited.compile(
      optimizer=tf_dp.DPOptimizer(
          K.optimizers.SGD(1.0), l2_norm_clip=1.0, noise_multiplier=0.0,
          population_size=n, sampling="poisson", sampling_probability=1.0,
          privacy_unit="user", max_examples_per_user=4, max_lots=4),
      loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  with pytest.warns(UserWarning, match="seed=5"):
    audited.fit(tf_dp.data.poisson_sampled_users(
        mixed.x, mixed.y, mixed.user_ids, 1.0, 1, max_examples_per_user=4,
        seed=5), verbose=0)
  # One lot of every user: each included canary-user moved by C / (q n).
  np.testing.assert_allclose(kc.dirac_canary_scores(audited, canaries),
                             canaries.included / n, rtol=1e-6)
