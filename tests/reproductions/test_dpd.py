"""DPD (Ermis & Cemgil) in Keras: the update of one step, and its ledger."""

import numpy as np
import pytest
import tensorflow as tf

import tf_dp
from tf_dp.reproductions import dpd
from tf_dp.reproductions.dpd import make_dpd_optimizer
from tests.keras import helpers


def _assert_one_epoch_reaches(model, opt, loss, x, y, batch_size, expected):
  model = tf_dp.keras.make_private(model)
  model.compile(optimizer=opt, loss=loss)
  model.fit(x, y, batch_size=batch_size, epochs=1, verbose=0, shuffle=False)
  for a, v in zip(expected, model.trainable_variables):
    np.testing.assert_allclose(v.numpy(), a, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("K", helpers.keras_modules())
def test_one_step_of_batch_clipping_is_algorithm_1_literally(K):
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
                                 clipping_unit="batch", sampling="shuffled",
                                 learning_rate_decay="step", keras=K)
  _assert_one_epoch_reaches(model, opt, loss, x, y, s, expected)
  assert info["iterations"] == 5


@pytest.mark.parametrize("K", helpers.keras_modules()[:1])
def test_ledger_records_batch_clipping_and_honest_epsilon(K):
  x, y = helpers.make_data("dense", 100, seed=5)
  opt, info = make_dpd_optimizer(100, 10, 1, 2.0, 0.05, epsilon=1.0,
                                 delta=1e-4, method="zcdp",
                                 clipping_unit="batch", sampling="fixed_size",
                                 keras=K)
  model = tf_dp.keras.make_private(helpers.build_model(K, "dense"))
  model.compile(optimizer=opt,
                loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  data = tf_dp.data.fixed_size_sampled_batches(x, y, 10, info["iterations"],
                                               seed=1)
  model.fit(data, epochs=1, verbose=0)
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
      100, 10, 2 * info["sigma"], 1, 1e-4, sampling="fixed_size")
  assert eps == pytest.approx(expected, rel=1e-4)
  assert info["claimed_epsilon"] == pytest.approx(1.0, rel=1e-6)


@pytest.mark.parametrize("clipping_unit", ["per_example", "batch"])
@pytest.mark.parametrize("K", helpers.keras_modules()[:1])
def test_noise_of_one_dpd_step(K, clipping_unit):
  # Zero inputs: the clipped gradient of the kernel is 0, so each step moves
  # the 6x5 kernel by (eta_t / 2) * xi', xi' ~ N(0, 4 C^2 sigma^2). Over 96
  # steps x 30 entries the rescaled updates have stddev 2 C sigma (tolerance
  # 8%: the sample stddev of 2880 draws has relative sd 1.3%, so 6.1 sd,
  # 1.3e-9; the noise comes from OS entropy, fresh in every run).
  n, s, c, eta0, sigma = 960, 10, 2.0, 0.05, 1.5
  x = np.zeros((n, 6), np.float32)
  y = np.zeros(n, np.int32)
  opt, _ = make_dpd_optimizer(n, s, 1, c, eta0, noise_multiplier=sigma,
                              clipping_unit=clipping_unit,
                              sampling="shuffled", learning_rate_decay="step",
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

  model.fit(x, y, batch_size=s, epochs=1, verbose=0, callbacks=[Record()])
  assert np.std(rescaled) == pytest.approx(2 * c * sigma, rel=0.08)


@pytest.mark.parametrize("K", helpers.keras_modules())
def test_one_step_of_per_example_clipping(K):
  # theta_1 = theta_0 - (eta_1 / 2) sum_i clip_C(grad l_i), no noise; a
  # small C so that every example is clipped.
  x, y = helpers.make_data("dense", 10, seed=6)
  n, s, c, eta0 = 50, 10, 0.1, 0.05
  model = helpers.build_model(K, "dense")
  loss = K.losses.SparseCategoricalCrossentropy(from_logits=True)
  for g in helpers.record_grads(model, x, y):
    assert np.sqrt(sum(np.sum(t * t) for t in g)) > c
  # The reference averages the clipped gradients: lr = S eta_0 / 2.
  expected = helpers.reference_update(model, x, y, clip=c, lr=s * eta0 / 2)
  opt, _ = make_dpd_optimizer(n, s, 1, c, eta0, noise_multiplier=0.0,
                              sampling="shuffled", keras=K)
  _assert_one_epoch_reaches(model, opt, loss, x, y, s, expected)


@pytest.mark.parametrize("K", helpers.keras_modules()[:1])
def test_poisson_run_ledger_gives_the_calibrated_epsilon(K):
  # method="rdp": sigma is calibrated so that the ledger of the run performed
  # (Poisson, add/remove, noise multiplier 2 sigma) gives the target epsilon
  # (to the calibration's 1e-3 relative tolerance, and never above it).
  n, s, epochs = 200, 20, 2
  x, y = helpers.make_data("dense", n, seed=7)
  opt, info = make_dpd_optimizer(n, s, epochs, 1.0, 0.05, epsilon=2.0,
                                 delta=1e-5, keras=K)
  assert info["iterations"] == 20 and info["sampling"] == "poisson"
  data = tf_dp.data.poisson_sampled_batches(x, y, info["sampling_probability"],
                                            info["iterations"], seed=1)
  model = tf_dp.keras.make_private(helpers.build_model(K, "dense"))
  model.compile(optimizer=opt,
                loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  model.fit(data, epochs=1, verbose=0)
  samples = opt.ledger.to_dict()["samples"]
  assert len(samples) == 20 and samples[0]["sampling"] == "poisson"
  query = samples[0]["sum_queries"][0]
  assert query["noise_stddev"] / query["l2_norm_clip"] == pytest.approx(
      2 * info["sigma"], rel=1e-5)
  eps, _ = tf_dp.analysis.compute_epsilon_from_ledger(opt.ledger, 1e-5)
  assert eps == pytest.approx(info["claimed_epsilon"], rel=1e-6)
  assert 2.0 * (1 - 2e-3) <= eps <= 2.0


def test_refuses_combinations_that_cannot_be_accounted():
  with pytest.raises(ValueError, match="clipping_unit='batch' needs"):
    make_dpd_optimizer(100, 10, 1, 2.0, 0.05, noise_multiplier=1.0,
                       clipping_unit="batch")
  with pytest.raises(ValueError, match="as_published applies"):
    make_dpd_optimizer(100, 10, 1, 2.0, 0.05, epsilon=1.0, delta=1e-5,
                       as_published=True)
  with pytest.raises(ValueError, match="sampling must be one of"):
    make_dpd_optimizer(100, 10, 1, 2.0, 0.05, noise_multiplier=1.0,
                       sampling="shuffle")
  with pytest.raises(ValueError, match="Give noise_multiplier"):
    make_dpd_optimizer(100, 10, 1, 2.0, 0.05, epsilon=1.0)


@pytest.mark.parametrize("K", helpers.keras_modules())
def test_learning_rate_decays_per_pass_as_eta0_over_t(K):
  schedule = dpd.dpd_learning_rate(K, 2.5, 5)
  rates = [float(schedule(step)) for step in range(12)]
  np.testing.assert_allclose(rates, [2.5] * 5 + [1.25] * 5 + [2.5 / 3] * 2,
                             rtol=1e-6)
  assert dpd.dpd_iterations(1438, 100, 100, "poisson") == 1438
  assert dpd.dpd_iterations(1438, 100, 100, "fixed_size") == 1500
