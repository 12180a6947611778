"""DP-SGD training with make_private + DPOptimizer on every Keras flavour."""

import math

import numpy as np
import pytest
import tensorflow as tf

import tf_dp
from tests.keras import helpers
from tests.keras.test_callbacks import dense_model

KERAS = helpers.keras_modules()
KINDS = ["dense", "conv", "embedding", "rnn"]


compile_dp = helpers.compile_dp_sgd
weights = helpers.float64_weights


METHODS = ["fast", "vectorized"]


# Against Keras' own fit: the averaging of the clipped sum is the one of
# Keras' loss, shown on the dense model. Each layer kind's per-example
# gradients (conv, embedding, recurrent) are checked against the loop of
# Keras' own gradients (batch of one) by test_small_clip_equals_per_example_
# loop, which runs the same step with a clip factor below 1.
@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("method", METHODS)
def test_no_noise_huge_clip_equals_plain_sgd(K, method):
  kind = "dense"
  x, y = helpers.make_data(kind, 8)
  plain = helpers.build_model(K, kind)
  plain.compile(optimizer=K.optimizers.SGD(1.0),
                loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  dp = helpers.build_model(K, kind)
  with pytest.warns(UserWarning, match="noise_multiplier=0"):
    dp = compile_dp(K, dp, 8, clip=1e6, noise=0.0, per_example_method=method)
  plain.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
  dp.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
  for a, b in zip(weights(plain), weights(dp)):
    np.testing.assert_allclose(a, b, atol=1e-6)


# Recurrent models against the same loop: SimpleRNN on every (flavour, path)
# pair in tests/keras/test_dtype_policies.py (mixed_bfloat16 and float64),
# LSTM, GRU and masked RNNs in float32 below
# (test_recurrent_layers_pfor_cannot_convert_equal_the_loop).
@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("kind", [k for k in KINDS if k != "rnn"])
@pytest.mark.parametrize("method", METHODS)
def test_small_clip_equals_per_example_loop(K, kind, method):
  x, y = helpers.make_data(kind, 8, seed=1)
  model = helpers.build_model(K, kind)
  expected = helpers.reference_update(model, x, y, clip=0.05, lr=1.0)
  with pytest.warns(UserWarning):
    model = compile_dp(K, model, 8, clip=0.05, noise=0.0,
                       per_example_method=method)
  model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
  for a, b in zip(expected, weights(model)):
    np.testing.assert_allclose(b, a, atol=1e-6)


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("method", METHODS)
def test_microbatches_equal_loop_over_microbatch_means(K, method):
  x, y = helpers.make_data("dense", 12, seed=2)
  model = helpers.build_model(K, "dense")
  expected = helpers.reference_update(model, x, y, clip=0.05, lr=1.0,
                                      microbatch=3)
  with pytest.warns(UserWarning):
    model = compile_dp(K, model, 12, clip=0.05, noise=0.0, num_microbatches=4,
                       per_example_method=method)
  model.fit(x, y, batch_size=12, epochs=1, shuffle=False, verbose=0)
  for a, b in zip(expected, weights(model)):
    np.testing.assert_allclose(b, a, atol=1e-6)
  sample = model.optimizer.ledger.to_dict()["samples"][0]
  assert sample["examples_per_record"] == 3
  assert sample["sampling_probability"] == pytest.approx(1.0)


@pytest.mark.parametrize("K", KERAS)
def test_gradient_accumulation_adds_noise_once_per_lot(K):
  x, y = helpers.make_data("dense", 12, seed=3)
  model = helpers.build_model(K, "dense")
  expected = helpers.reference_update(model, x, y, clip=0.05, lr=1.0)
  with pytest.warns(UserWarning):
    model = compile_dp(K, model, 12, clip=0.05, noise=0.0,
                       gradient_accumulation_steps=3, sampling="fixed_order")
  model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
  for a, b in zip(expected, weights(model)):
    np.testing.assert_allclose(b, a, atol=1e-6)
  samples = model.optimizer.ledger.to_dict()["samples"]
  assert len(samples) == 1  # one lot of 3 batches, one ledger sample.
  assert samples[0]["sampling_probability"] == pytest.approx(1.0)


@pytest.mark.parametrize("K", KERAS)
def test_update_noise_stddev(K):
  # Zero inputs give zero gradients for the 6x5 kernel, so each step's
  # kernel update is pure noise with stddev lr * C * z / B. 96 steps x 30
  # entries = 2880 draws: the sample stddev has relative sd 1/sqrt(5760) =
  # 1.3%; the tolerance of 8% is 6.1 sd (1.3e-9: the noise comes from OS
  # entropy, fresh in every run). Steps must also be uncorrelated.
  n, batch, clip, z = 960, 10, 2.0, 1.5
  x = np.zeros((n, 6), "float32")
  y = np.zeros((n,), "int32")
  model = compile_dp(K, helpers.build_model(K, "dense"), n, clip=clip,
                     noise=z, lr=1.0)
  kernel = model.trainable_variables[0]
  deltas = []

  class Record(K.callbacks.Callback):

    def on_train_batch_begin(self, batch, logs=None):
      self.before = kernel.numpy().copy()

    def on_train_batch_end(self, batch, logs=None):
      deltas.append((kernel.numpy() - self.before).ravel())

  model.fit(x, y, batch_size=batch, epochs=1, verbose=0,
            callbacks=[Record()])
  deltas = np.array(deltas)
  assert deltas.shape == (n // batch, 30)
  assert np.std(deltas) == pytest.approx(clip * z / batch, rel=0.08)
  # Fresh noise each step: lag-1 correlation of 2850 pairs, sd 0.019
  # (0.12 is 6.4 sd); a repeated draw gives 1.
  lag1 = np.corrcoef(deltas[:-1].ravel(), deltas[1:].ravel())[0, 1]
  assert abs(lag1) < 0.12


@pytest.mark.parametrize("K", KERAS)
def test_ledger_matches_compute_dp_sgd_privacy(K):
  x, y = helpers.make_data("dense", 64)
  model = compile_dp(K, helpers.build_model(K, "dense"), 64, clip=1.0,
                     noise=1.1, lr=0.1)
  model.fit(x, y, batch_size=16, epochs=3, verbose=0)
  eps, _ = tf_dp.analysis.compute_epsilon_from_ledger(model.optimizer.ledger,
                                                      1e-5)
  expected, _ = tf_dp.analysis.compute_dp_sgd_privacy(
      64, 16, 1.1, 3, 1e-5, sampling="fixed_size")
  assert eps == pytest.approx(expected, rel=1e-5)


def _recurrent_cases():
  """The masked SimpleRNN on each flavour; each other layer and path on one
  flavour (tf-keras's TensorList LSTM on Keras 2): a case takes 15-90 s,
  most of it TensorFlow tracing the loop. All but the masked SimpleRNN are
  marked slow (TF 2.21 only in CI): TF 2.15's Keras 2 layers run the same
  tf_dp code as TF 2.21's tf-keras."""
  slow = pytest.mark.slow
  cases = {"keras2": [("LSTM", "auto", slow),
                      ("masked LSTM", "vectorized", slow),
                      ("masked SimpleRNN", "auto", None)],
           "keras3": [("GRU", "vectorized", slow),
                      ("masked SimpleRNN", "auto", None)]}
  for flavour in KERAS:
    for kind, method, mark in cases[flavour.id]:
      yield pytest.param(flavour.values[0], kind, method,
                         id=f"{flavour.id}-{kind}-{method}",
                         marks=[mark] if mark else [])


@pytest.mark.parametrize("K,kind,method", list(_recurrent_cases()))
def test_recurrent_layers_pfor_cannot_convert_equal_the_loop(K, kind, method):
  # tf-keras LSTM/GRU (TensorList variants) and RNNs behind an Embedding
  # (masked or not) defeat tf.vectorized_map; their records are computed by
  # a loop, still each from its own example. (A masked RNN takes a tensor
  # keyword, so "auto" runs the rest of the model on the fast path.)
  masked = kind.startswith("masked")
  layer = getattr(K.layers, kind.split()[-1])
  init = K.initializers.GlorotUniform(seed=0)
  model = K.Sequential([
      K.layers.Input((7,), dtype="int32"),
      K.layers.Embedding(10, 4, mask_zero=masked,
                         embeddings_initializer=init),
      layer(3, kernel_initializer=init,
            recurrent_initializer=K.initializers.Orthogonal(seed=0)),
      K.layers.Dense(3, kernel_initializer=init)])
  rng = np.random.default_rng(0)
  x = rng.integers(1, 10, size=(6, 7)).astype("int32")
  x[:, 5:] = 0
  x[2, 3:] = 0
  y = rng.integers(0, 3, size=(6,)).astype("int32")
  expected = helpers.reference_update(model, x, y, clip=0.05, lr=1.0)
  model = compile_dp(K, model, 6, clip=0.05, noise=0.0,
                     per_example_method=method)
  model.fit(x, y, batch_size=6, epochs=1, shuffle=False, verbose=0)
  for a, b in zip(expected, weights(model)):
    np.testing.assert_allclose(b, a, atol=1e-6)


@pytest.mark.parametrize("K", KERAS)
def test_dropout_draws_one_mask_per_example(K):
  model = K.Sequential([K.layers.Input((50,)),
                        K.layers.Dense(50, use_bias=False,
                                       kernel_initializer="identity"),
                        K.layers.Dropout(0.5)])
  tf_dp.keras.make_private(model)
  out = tf.vectorized_map(lambda xi: model(xi[None], training=True)[0],
                          tf.ones([8, 50]))
  assert len({tuple(row) for row in out.numpy()}) == 8


@pytest.mark.parametrize("K", KERAS)
def test_batch_norm_is_refused_with_both_fixes(K):
  model = K.Sequential([K.layers.Input((4,)), K.layers.Dense(3),
                        K.layers.BatchNormalization()])
  model = helpers.compile_dp(K, model, 8)
  with pytest.raises(ValueError,
                     match="GroupNormalization.*DPBatchNormalization"):
    model.fit(np.ones((8, 4), "float32"), np.zeros(8, "int32"), verbose=0)


@pytest.mark.parametrize("K", KERAS)
def test_unconverted_model_fails_at_first_step_with_the_fix(K):
  x, y = helpers.make_data("dense", 8)
  model = helpers.build_model(K, "dense")
  model.compile(optimizer=tf_dp.DPOptimizer(K.optimizers.SGD(0.1), 1.0, 1.0,
                                            population_size=8),
                loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  before = weights(model)
  with pytest.raises(Exception, match="make_private"):
    model.fit(x, y, batch_size=8, verbose=0)
  for a, b in zip(before, weights(model)):
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("K", KERAS)
def test_the_fix_after_a_failed_fit_trains_privately(K):
  # The error's one-line fix, applied after the failed fit, without a new
  # compile: the next fit takes the DP step (one clipped, noise-free step
  # equals the per-example loop).
  x, y = helpers.make_data("dense", 8)
  model = helpers.build_model(K, "dense")
  expected = helpers.reference_update(model, x, y, clip=0.05, lr=1.0)
  model.compile(optimizer=tf_dp.DPOptimizer(K.optimizers.SGD(1.0), 0.05, 0.0,
                                            population_size=8),
                loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  with pytest.raises(Exception, match="make_private"):
    model.fit(x, y, batch_size=8, verbose=0)
  model = tf_dp.keras.make_private(model)
  model.fit(x, y, batch_size=8, verbose=0, shuffle=False)
  for a, b in zip(expected, weights(model)):
    np.testing.assert_allclose(a, b, atol=1e-6)
  assert len(model.optimizer.ledger.to_dict()["samples"]) == 1


@pytest.mark.parametrize("K", KERAS)
def test_private_model_with_plain_optimizer_is_refused(K):
  x, y = helpers.make_data("dense", 8)
  model = tf_dp.keras.make_private(helpers.build_model(K, "dense"))
  model.compile(optimizer=K.optimizers.SGD(0.1),
                loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  with pytest.raises(Exception, match="DPOptimizer"):
    model.fit(x, y, batch_size=8, verbose=0)


@pytest.mark.parametrize("K", KERAS)
def test_batch_not_divisible_into_microbatches_is_a_clear_error(K):
  x, y = helpers.make_data("dense", 10)
  model = compile_dp(K, helpers.build_model(K, "dense"), 10, clip=1.0,
                     noise=1.0, num_microbatches=4)
  with pytest.raises(Exception, match="does not divide into num_microbatches"):
    model.fit(x, y, batch_size=10, verbose=0)


@pytest.mark.parametrize("K", KERAS)
def test_short_last_batch_of_a_dataset_with_microbatches_is_a_clear_error(K):
  """Batches 8, 8, 2 of a dataset (no static batch size) with 4
  microbatches: the last one fails with tf_dp's message, not a Reshape
  error, and the ledger records the two lots released (it recorded a
  third, with 2 / 4 -> 0 examples per record, which made it unreadable)."""
  x, y = helpers.make_data("dense", 18)
  model = compile_dp(K, helpers.build_model(K, "dense"), 18, clip=1.0,
                     noise=1.0, num_microbatches=4)
  data = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(18).batch(8)
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match="does not divide into num_microbatches=4"):
    model.fit(data, verbose=0)
  samples = model.optimizer.ledger.to_dict()["samples"]
  assert [s["examples_per_record"] for s in samples] == [2, 2]
  assert int(model.optimizer.iterations.numpy()) == 2


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("method", METHODS)
def test_batch_averaging_loss_function_is_evaluated_per_example(K, method):
  # A loss function that averages over its batch is evaluated on batches of
  # one example, so it gives each example's own loss: the step equals a
  # per-example loop with that loss.
  x, y = helpers.make_data("dense", 8, seed=2)
  model = helpers.build_model(K, "dense")
  loss = lambda yt, yp: tf.reduce_mean(tf.square(yp))
  clip, total = 0.05, [np.zeros(v.shape) for v in model.trainable_variables]
  for i in range(8):
    with tf.GradientTape() as tape:
      value = loss(y[i:i + 1], model(x[i:i + 1]))
    grads = [g.numpy() for g in tape.gradient(value,
                                              model.trainable_variables)]
    norm = math.sqrt(sum(float(np.sum(g * g)) for g in grads))
    total = [t + g * min(1.0, clip / norm) for t, g in zip(total, grads)]
  expected = [w - t / 8 for w, t in zip(weights(model), total)]
  model = tf_dp.keras.make_private(model)
  with pytest.warns(UserWarning, match="noise_multiplier=0"):
    optimizer = tf_dp.DPOptimizer(K.optimizers.SGD(1.0), clip, 0.0,
                                  population_size=8,
                                  per_example_method=method)
  model.compile(optimizer=optimizer, loss=loss)
  model.fit(x, y, batch_size=8, shuffle=False, verbose=0)
  for a, b in zip(expected, weights(model)):
    np.testing.assert_allclose(b, a, atol=1e-6)


@pytest.mark.parametrize("K", KERAS)
def test_poisson_training_records_poisson_samples(K):
  x, y = helpers.make_data("dense", 200)
  q = 0.1
  model = dense_model(K, 200, l2_norm_clip=1.0, noise_multiplier=1.0,
                      sampling="poisson", sampling_probability=q)
  data = tf_dp.data.poisson_sampled_batches(x, y, q, 20, seed=3)
  model.fit(data, epochs=1, verbose=0)
  eps, _ = tf_dp.analysis.compute_epsilon_from_ledger(
      model.optimizer.ledger, 1e-5)
  expected, _ = tf_dp.analysis.compute_dp_sgd_privacy(200, 20, 1.0, 2, 1e-5)
  assert eps == pytest.approx(expected, rel=1e-5)
  samples = model.optimizer.ledger.to_dict()["samples"]
  assert {s["sampling"] for s in samples} == {"poisson"}


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("method", METHODS)
def test_poisson_padding_rows_are_no_records_of_an_adaptive_clip(K, method):
  # A Poisson lot of 4 examples padded to 8 rows (weight 0). Each example's
  # gradient is far above the clip (unclipped bit -1/2); the padding rows'
  # zero gradients would count as unclipped (+1/2) and change the bit sum
  # by 1, not 1/2, when an example takes a padding row's place. Without
  # noise and with eta = 1 the new clip is C exp(-(f - 1/2)), f = sum of
  # the present examples' bits / 8 + 1/2 = 1/4.
  x, y = helpers.make_data("dense", 8)
  x[:4] *= 100.0
  x[4:], y[4:] = 0.0, 0
  weight = np.array([1, 1, 1, 1, 0, 0, 0, 0], np.float32)
  n, expected_records, clip = 100, 8.0, 1e-3
  query = tf_dp.dp_query.QuantileAdaptiveClipSumQuery(
      clip, 0.0, 0.5, 1.0, 0.0, expected_records)
  model = tf_dp.keras.make_private(helpers.build_model(K, "dense"))
  optimizer = tf_dp.DPOptimizer(
      K.optimizers.SGD(0.0), dp_query=query, population_size=n,
      sampling="poisson", sampling_probability=expected_records / n,
      per_example_method=method)
  model.compile(optimizer=optimizer,
                loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  data = tf_dp.data.declare_sampling(
      tf.data.Dataset.from_tensors((x, y, weight)), "poisson",
      expected_records / n, n)
  model.fit(data, epochs=1, verbose=0)
  new_clip = optimizer.dp_engine.global_state["grads"].l2_norm_clip
  assert float(new_clip.numpy()) == pytest.approx(clip * math.exp(0.25),
                                                  rel=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("K", KERAS[:1])
def test_short_mnist_fit_learns_with_noise_and_matches_accountant(K):
  (x, y), (xt, yt) = tf_dp.data.load_mnist()
  n = 20000
  x = (x[:n].reshape(n, -1) / 255.0).astype("float32")
  y = y[:n].astype("int32")
  xt = (xt[:2000].reshape(2000, -1) / 255.0).astype("float32")
  yt = yt[:2000].astype("int32")
  model = tf_dp.keras.make_private(K.Sequential([
      K.layers.Input((784,)), K.layers.Dense(128, activation="relu"),
      K.layers.Dense(10)]))
  model.compile(optimizer=tf_dp.DPOptimizer(
      K.optimizers.SGD(0.5), l2_norm_clip=1.0, noise_multiplier=1.1,
      population_size=n), loss=K.losses.SparseCategoricalCrossentropy(
          from_logits=True), metrics=["accuracy"])
  model.fit(x, y, batch_size=250, epochs=2, verbose=0)
  _, accuracy = model.evaluate(xt, yt, verbose=0)
  assert accuracy > 0.8  # chance is 0.1
  eps, _ = tf_dp.analysis.compute_epsilon_from_ledger(
      model.optimizer.ledger, 1e-5)
  expected, _ = tf_dp.analysis.compute_dp_sgd_privacy(
      n, 250, 1.1, 2, 1e-5, sampling="fixed_size")
  assert eps == pytest.approx(expected, rel=1e-5) and math.isfinite(eps)
