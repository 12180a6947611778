"""Tests of tf_dp.keras.optimizer_base: DPOptimizer.private_step, the DP
step of fit for custom training loops (against a per-example loop)."""

import functools

import numpy as np
import pytest
import tensorflow as tf

import tf_dp
from tests.keras import helpers

KERAS = helpers.keras_modules()


def _weights(model):
  return [np.asarray(v.numpy(), np.float64) for v in model.trainable_variables]


def _optimizer(K, clip, noise, n, **kwargs):
  return tf_dp.DPOptimizer(K.optimizers.SGD(1.0), l2_norm_clip=clip,
                           noise_multiplier=noise, population_size=n,
                           **kwargs)


@pytest.mark.parametrize("K", KERAS)
def test_one_step_in_a_tf_function_equals_the_per_example_loop(K):
  x, y = helpers.make_data("dense", 8)
  model = helpers.build_model(K, "dense")
  expected = helpers.reference_update(model, x, y, clip=0.05, lr=1.0)
  model = tf_dp.keras.make_private(model)
  optimizer = _optimizer(K, 0.05, 0.0, 8)
  loss = K.losses.SparseCategoricalCrossentropy(from_logits=True)

  @tf.function
  def train_step(x, y):
    return optimizer.private_step(model, loss, x, y)

  losses = train_step(tf.constant(x), tf.constant(y))
  assert losses.shape == (8,)
  for a, b in zip(expected, _weights(model)):
    np.testing.assert_allclose(b, a, atol=1e-6)
  samples = optimizer.ledger.to_dict()["samples"]
  assert len(samples) == 1 and samples[0]["sampling_probability"] == 1.0


@pytest.mark.parametrize("K", KERAS)
def test_a_users_tf_function_traces_the_dp_step_once(K):
  """The DP state (the queries' state, the lot, the noise key, the wrapped
  Adam's slots) is created outside the user's tf.function's variable
  capture: a tf.function whose trace creates variables is traced a second
  time (as ``fit``'s step, see test_private_model). Four batches in lots
  of two: two ledger samples."""
  x, y = helpers.make_data("dense", 16)
  model = tf_dp.keras.make_private(helpers.build_model(K, "dense"))
  optimizer = tf_dp.DPOptimizer(K.optimizers.Adam(0.01), l2_norm_clip=1.0,
                                noise_multiplier=1.0, population_size=16,
                                gradient_accumulation_steps=2)
  loss = K.losses.SparseCategoricalCrossentropy(from_logits=True)
  traces = []

  @tf.function
  def train_step(x, y):
    traces.append(1)
    return optimizer.private_step(model, loss, x, y)

  for i in range(4):
    train_step(tf.constant(x[4 * i:4 * i + 4]), tf.constant(y[4 * i:4 * i + 4]))
  assert len(traces) == 1
  samples = optimizer.ledger.to_dict()["samples"]
  assert len(samples) == 2 and samples[0]["sampling_probability"] == 0.5


@pytest.mark.parametrize("K", KERAS)
def test_steps_traced_once_equal_eager_steps(K):
  """Without noise, lots of two batches through Adam: the traced steps
  (one trace) move the weights as the eager steps do, up to float32
  rounding of different kernels (1e-6), and record the same ledger."""
  x, y = helpers.make_data("dense", 16)
  loss = K.losses.SparseCategoricalCrossentropy(from_logits=True)
  results = []
  for traced in (False, True):
    model = tf_dp.keras.make_private(helpers.build_model(K, "dense"))
    optimizer = tf_dp.DPOptimizer(K.optimizers.Adam(0.01), l2_norm_clip=0.1,
                                  noise_multiplier=0.0, population_size=16,
                                  gradient_accumulation_steps=2)
    step = functools.partial(optimizer.private_step, model, loss)
    step = tf.function(step) if traced else step
    for i in range(4):
      step(tf.constant(x[4 * i:4 * i + 4]), tf.constant(y[4 * i:4 * i + 4]))
    results.append((_weights(model), optimizer.ledger.to_dict()["samples"]))
  (eager, eager_samples), (traced_w, traced_samples) = results
  assert any(np.any(a != b) for a, b in zip(
      eager, _weights(tf_dp.keras.make_private(
          helpers.build_model(K, "dense")))))
  for a, b in zip(eager, traced_w):
    np.testing.assert_allclose(b, a, atol=1e-6)
  assert traced_samples == eager_samples and len(eager_samples) == 2


@pytest.mark.parametrize("K", KERAS)
def test_a_loss_that_mixes_its_batch_cannot_mix_examples(K):
  # On a batch, the function shifts every example's logits by the batch's
  # label histogram, so every example's loss would read every label.
  # private_step evaluates it on each example alone: replacing one example
  # leaves the other examples' losses unchanged and moves the clipped sum
  # by at most 2C.
  def mixing_loss(y_true, y_pred):
    labels = tf.cast(tf.reshape(y_true, [-1]), tf.int32)
    histogram = tf.reduce_mean(tf.one_hot(labels, 3), axis=0)
    return tf.keras.backend.sparse_categorical_crossentropy(
        y_true, y_pred + 3.0 * tf.roll(histogram, 1, axis=0),
        from_logits=True)

  x, y = helpers.make_data("dense", 8)
  x2, y2 = x.copy(), y.copy()
  x2[3], y2[3] = 5.0 * x[6], (y[6] + 1) % 3
  clip = 0.01
  updates, losses = [], []
  for xs, ys in ((x, y), (x2, y2)):
    model = tf_dp.keras.make_private(helpers.build_model(K, "dense"))
    optimizer = _optimizer(K, clip, 0.0, 8)
    before = _weights(model)
    losses.append(optimizer.private_step(model, mixing_loss, xs, ys).numpy())
    updates.append([a - b for a, b in zip(_weights(model), before)])
  others = np.arange(8) != 3
  np.testing.assert_allclose(losses[0][others], losses[1][others], rtol=1e-6)
  assert losses[0][3] != losses[1][3]
  change = 8 * np.sqrt(sum(np.sum((a - b) ** 2)
                           for a, b in zip(*updates)))
  assert 0 < change <= 2 * clip * (1 + 1e-4)


@pytest.mark.parametrize("K", KERAS)
def test_lots_of_several_batches_noise_once_and_record_once(K):
  x, y = helpers.make_data("dense", 16)
  model = tf_dp.keras.make_private(helpers.build_model(K, "dense"))
  optimizer = _optimizer(K, 1.0, 1.0, 16, gradient_accumulation_steps=2)
  step = tf.function(lambda x, y: optimizer.private_step(
      model, "sparse_categorical_crossentropy", x, y))
  before = _weights(model)
  step(tf.constant(x[:8]), tf.constant(y[:8]))
  for a, b in zip(before, _weights(model)):
    np.testing.assert_array_equal(a, b)  # The lot is still open.
  step(tf.constant(x[8:]), tf.constant(y[8:]))
  assert any(np.any(a != b) for a, b in zip(before, _weights(model)))
  samples = optimizer.ledger.to_dict()["samples"]
  assert len(samples) == 1 and samples[0]["sampling_probability"] == 1.0


@pytest.mark.parametrize("K", KERAS)
def test_an_unconverted_model_is_refused_with_the_fix(K):
  x, y = helpers.make_data("dense", 8)
  model = helpers.build_model(K, "dense")
  with pytest.raises(ValueError, match="make_private"):
    _optimizer(K, 1.0, 1.0, 8).private_step(model, "mse", x, y)
