"""The ways the privacy promise broke off the happy path, each a test.

A BatchNormalization subclass under another name, Poisson lots of several
batches, fixed-size lots across epochs, a changed population size, and a
budget with several steps per execution. (String losses are covered by
test_per_example_losses.py and test_neighbours.py; save/load and noise keys
by tests/keras/test_save_load.py and tests/dp_query/test_noise.py.)
"""

import warnings

import numpy as np
import pytest
import tensorflow as tf

import tf_dp
from tests.keras import helpers
from tf_dp.data import poisson_sampled_batches

KERAS = helpers.keras_modules()


@pytest.mark.parametrize("K", KERAS)
def test_a_batch_norm_subclass_under_another_name_is_refused(K):

  class MyNorm(K.layers.BatchNormalization):
    pass

  model = K.Sequential([K.Input((4,)), K.layers.Dense(3), MyNorm(),
                        K.layers.Dense(2)])
  model = helpers.compile_dp(K, model, 8)
  with pytest.raises(ValueError, match="MyNorm.*combines examples"):
    model.fit(np.ones((8, 4), "float32"), np.zeros(8, "int32"), verbose=0)


@pytest.mark.parametrize("K", KERAS)
def test_a_layer_called_dropout_is_not_patched_as_dropout(K):

  class Dropout(K.layers.Layer):  # pylint: disable=invalid-name

    def call(self, inputs):
      return inputs * 2.0

  model = K.Sequential([K.Input((4,)), Dropout(), K.layers.Dense(2)])
  model = tf_dp.keras.make_private(model)
  x = np.ones((3, 4), "float32")
  np.testing.assert_allclose(model.layers[0](x, training=True), 2 * x)


def test_poisson_lots_of_several_batches_hold_each_example_once():
  # 200 lots of one Poisson(q = 0.3) draw over n = 50, split into 3 batches:
  # an example is in a lot at most once, and lot sizes are Binomial(50, 0.3)
  # (mean 15, sd 3.2; the mean of 200 sizes has sd 0.23: tolerance 1).
  n, q, k = 50, 0.3, 3
  x = np.arange(n, dtype=np.float32)[:, None]
  y = np.arange(n, dtype=np.int64)
  batches = list(poisson_sampled_batches(x, y, q, 200, seed=4,
                                         batches_per_lot=k))
  assert len(batches) == 200 * k
  assert len({int(b[0].shape[0]) for b in batches}) == 1
  sizes = []
  for lot in range(200):
    chosen = np.concatenate([
        b[1].numpy()[b[2].numpy() > 0] for b in batches[lot * k:(lot + 1) * k]])
    assert len(set(chosen.tolist())) == len(chosen)
    sizes.append(len(chosen))
  assert np.mean(sizes) == pytest.approx(n * q, abs=1.0)


def test_re_iterating_a_poisson_dataset_draws_fresh_lots():
  x = np.arange(100, dtype=np.float32)[:, None]
  y = np.arange(100, dtype=np.int64)
  data = poisson_sampled_batches(x, y, 0.2, 5, seed=7)
  first = [b[1].numpy().tolist() for b in data]
  second = [b[1].numpy().tolist() for b in data]
  assert first != second


@pytest.mark.parametrize("K", KERAS)
def test_poisson_lot_of_several_batches_is_one_recorded_sample(K):
  n, q, k = 64, 0.25, 2
  x, y = helpers.make_data("dense", n)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    model = helpers.compile_dp(
        K, helpers.build_model(K, "dense"), n, noise_multiplier=1.0,
        sampling="poisson", sampling_probability=q,
        gradient_accumulation_steps=k)
  data = poisson_sampled_batches(x, y, q, 3, seed=1, batches_per_lot=k)
  model.fit(data, verbose=0)
  samples = model.optimizer.ledger.to_dict(
      ledger_format="tf_dp.privacy_ledger/1")["samples"]
  assert len(samples) == 3
  assert all(s["sampling"] == "poisson" and s["sampling_probability"] == q
             for s in samples)


@pytest.mark.parametrize("K", KERAS)
def test_fixed_size_lots_never_span_two_epochs(K):
  x, y = helpers.make_data("dense", 40)
  model = helpers.compile_dp(K, helpers.build_model(K, "dense"), 40,
                             gradient_accumulation_steps=2)
  # 40 / 8 = 5 batches per epoch: a lot of 2 would straddle epochs.
  with pytest.raises(ValueError, match="multiple of 2"):
    model.fit(x, y, batch_size=8, epochs=2, verbose=0)
  assert int(model.optimizer.ledger.sample_count) == 0
  # With 4 batches per epoch the lots fit: 2 per epoch.
  model.fit(x[:32], y[:32], batch_size=8, epochs=2, verbose=0)
  assert int(model.optimizer.ledger.sample_count) == 4


@pytest.mark.parametrize("K", KERAS)
def test_incomplete_lot_at_an_unknown_epoch_end_is_discarded(K):
  x, y = helpers.make_data("dense", 40)
  model = helpers.compile_dp(K, helpers.build_model(K, "dense"), 40,
                             gradient_accumulation_steps=2)
  # A generator dataset of unknown length, shuffled: 5 batches, known only
  # at the end.
  data = tf.data.Dataset.from_generator(
      lambda: ((x[i], y[i]) for i in range(40)),
      output_signature=(tf.TensorSpec([6], tf.float32),
                        tf.TensorSpec([], tf.int32))).shuffle(40).batch(8)
  with pytest.warns(UserWarning, match="discarded an incomplete lot"):
    model.fit(data, epochs=2, verbose=0)
  samples = model.optimizer.ledger.to_dict(
      ledger_format="tf_dp.privacy_ledger/1")["samples"]
  assert len(samples) == 4  # 2 whole lots per epoch; the 5th batch dropped.
  assert all(s["sampling_probability"] == pytest.approx(16 / 40)
             for s in samples)


def test_changing_the_population_size_changes_the_recorded_q():
  ledger = tf_dp.PrivacyLedger(1000, 0.1, sampling="fixed_size")
  event = [tf_dp.SumQueryEvent(1.0, 1.0)]
  ledger.record_sample(event, sample_size=tf.constant(100.0))
  ledger.set_sample_size(population_size=500)
  ledger.record_sample(event, sample_size=tf.constant(100.0))
  ledger.record_sample(event)  # The registered q follows n as well.
  samples = ledger.to_dict(ledger_format="tf_dp.privacy_ledger/1")["samples"]
  assert [s["sampling_probability"] for s in samples] == pytest.approx(
      [0.1, 0.2, 0.2])
  assert [s["population_size"] for s in samples] == [1000, 500, 500]


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("steps_per_execution", [1, 7])
def test_budget_holds_per_step_with_steps_per_execution(K,
                                                        steps_per_execution):
  x, y = helpers.make_data("dense", 64)
  model = tf_dp.keras.make_private(helpers.build_model(K, "dense"))
  model.compile(optimizer=tf_dp.DPOptimizer(
      K.optimizers.SGD(0.1), l2_norm_clip=1.0, noise_multiplier=2.0,
      population_size=64),
                loss=K.losses.SparseCategoricalCrossentropy(from_logits=True),
                steps_per_execution=steps_per_execution)
  target = 5.0  # one lot costs 2.71 here (fixed-size sampling, q = 1/4).
  budget = tf_dp.keras.PrivacyBudget(delta=1e-5, target_epsilon=target)
  model.fit(x, y, batch_size=16, epochs=20, verbose=0, callbacks=[budget])
  lots = int(model.optimizer.ledger.sample_count)
  assert budget.epsilon() <= target and not budget.exceeded
  more, _ = tf_dp.analysis.compute_dp_sgd_privacy(
      64, 16, 2.0, (lots + 1) * 16 / 64, 1e-5, sampling="fixed_size")
  assert more > target


def test_attention_trains_on_the_fast_path_and_is_refused_on_vectorized():
  # Keras 3 MultiHeadAttention under tf.vectorized_map hits TF 2.21's oneDNN
  # matmul bug: the fast path computes it without vectorized_map, and the
  # whole-model vectorized path refuses it with the fix.
  import keras  # pylint: disable=g-import-not-at-top
  if not keras.__version__.startswith("3"):
    pytest.skip("Keras 3 only")
  rng = np.random.default_rng(0)
  x = rng.normal(size=(32, 8, 4)).astype("float32")
  y = rng.integers(0, 3, 32).astype("int32")

  def attention_model():
    inputs = keras.Input((8, 4))
    h = keras.layers.MultiHeadAttention(2, 4)(inputs, inputs)
    return keras.Model(inputs,
                       keras.layers.Dense(3)(keras.layers.Flatten()(h)))

  model = helpers.compile_dp(keras, attention_model(), 32)
  model.fit(x, y, batch_size=8, verbose=0)
  assert int(model.optimizer.ledger.sample_count) == 4
  if tuple(int(v) for v in tf.__version__.split(".")[:2]) >= (2, 16):
    model = helpers.compile_dp(keras, attention_model(), 32,
                               per_example_method="vectorized")
    with pytest.raises(ValueError, match="per_example_method='auto'"):
      model.fit(x, y, batch_size=8, verbose=0)
