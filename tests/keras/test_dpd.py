"""DPD (Ermis & Cemgil) in Keras: the update of one step, and its ledger."""

import numpy as np
import pytest
import tensorflow as tf

import tf_dp
from tf_dp.keras.dpd import make_dpd_optimizer
from tests.keras import helpers


@pytest.mark.parametrize("K", helpers.keras_modules())
def test_one_step_is_algorithm_1(K):
  # theta_1 = theta_0 - (eta_1 / 2) clip_C((N/S) sum_i grad l_i), no noise.
  x, y = helpers.make_data("dense", 10, seed=4)
  n, s, c, eta0 = 50, 10, 2.0, 0.05
  model = helpers.build_model(K, "dense")
  loss = K.losses.SparseCategoricalCrossentropy(from_logits=True)
  with tf.GradientTape() as tape:
    mean_loss = tf.reduce_mean(loss.call(y, model(x)))
  grads = [tf.convert_to_tensor(g).numpy()
           for g in tape.gradient(mean_loss, model.trainable_variables)]
  full = [g * n for g in grads]  # (N/S) sum = N * mean
  norm = np.sqrt(sum(np.sum(g * g) for g in full))
  clipped = [g * min(1.0, c / norm) for g in full]
  expected = [v.numpy() - eta0 / 2 * g
              for v, g in zip(model.trainable_variables, clipped)]
  opt, info = make_dpd_optimizer(n, s, 1, c, eta0, noise_multiplier=0.0,
                                 keras=K)
  model = tf_dp.keras.make_private(model)
  model.compile(optimizer=opt, loss=loss)
  model.fit(x, y, batch_size=s, epochs=1, verbose=0, shuffle=False)
  for a, v in zip(expected, model.trainable_variables):
    np.testing.assert_allclose(v.numpy(), a, rtol=1e-5, atol=1e-6)
  assert info["iterations"] == 5


@pytest.mark.parametrize("K", helpers.keras_modules()[:1])
def test_ledger_records_batch_clipping_and_honest_epsilon(K):
  x, y = helpers.make_data("dense", 100, seed=5)
  opt, info = make_dpd_optimizer(100, 10, 1, 2.0, 0.05, epsilon=1.0,
                                 delta=1e-4, method="zcdp", keras=K)
  model = tf_dp.keras.make_private(helpers.build_model(K, "dense"))
  model.compile(optimizer=opt,
                loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  model.fit(x, y, batch_size=10, epochs=1, verbose=0)
  samples = opt.ledger.to_dict()["samples"]
  assert len(samples) == 10
  assert samples[0]["examples_per_record"] == 10
  assert samples[0]["sampling"] == "fixed_size"
  q = samples[0]["sum_queries"][0]
  assert q["noise_stddev"] / q["l2_norm_clip"] == pytest.approx(
      2 * info["sigma"], rel=1e-5)
  eps, _ = tf_dp.analysis.compute_epsilon_from_ledger(opt.ledger, 1e-4)
  # Replace-one, sensitivity 2C, noise 2C sigma: noise multiplier sigma.
  expected, _ = tf_dp.analysis.compute_dp_sgd_privacy(
      100, 10, 2 * info["sigma"], 1, 1e-4, sampling="without_replacement")
  assert eps == pytest.approx(expected, rel=1e-4)
  assert info["claimed_epsilon"] == pytest.approx(1.0, rel=1e-6)


@pytest.mark.parametrize("K", helpers.keras_modules()[:1])
def test_noise_of_one_dpd_step(K):
  # Zero inputs: the clipped gradient of the kernel is 0, so each step moves
  # the 6x5 kernel by (eta_t / 2) * xi', xi' ~ N(0, 4 C^2 sigma^2). Over 40
  # steps x 30 entries the rescaled updates have stddev 2 C sigma (tolerance
  # 8%: the sample stddev of 1200 draws has relative sd 2%).
  n, s, c, eta0, sigma = 400, 10, 2.0, 0.05, 1.5
  x = np.zeros((n, 6), np.float32)
  y = np.zeros(n, np.int32)
  opt, _ = make_dpd_optimizer(n, s, 1, c, eta0, noise_multiplier=sigma,
                              keras=K)
  model = tf_dp.keras.make_private(helpers.build_model(K, "dense"))
  model.compile(optimizer=opt,
                loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  kernel = model.trainable_variables[0]
  rescaled = []

  class Record(K.callbacks.Callback):

    def on_train_batch_begin(self, batch, logs=None):
      self.before = kernel.numpy().copy()

    def on_train_batch_end(self, batch, logs=None):
      eta_t = eta0 / (batch + 1)
      rescaled.append((kernel.numpy() - self.before).ravel() / (eta_t / 2))

  model.fit(x, y, batch_size=s, epochs=1, shuffle=False, verbose=0,
            callbacks=[Record()])
  assert np.std(rescaled) == pytest.approx(2 * c * sigma, rel=0.08)
