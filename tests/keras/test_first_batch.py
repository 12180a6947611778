"""The first batch of ``fit``'s input (``tf_dp.keras.first_batch``): read
without consuming the input, it feeds the privacy self-check, which refuses
a layer that mixes examples before any step whatever ``fit`` is given."""

import numpy as np
import pytest
import tensorflow as tf

import tf_dp
from tests.keras import helpers

KERAS = helpers.keras_modules()
N, BATCH = 40, 10


def _batch_centring_model(K, **dp_kwargs):
  """A model with a layer that subtracts the batch mean: one example's
  gradient depends on the others (the self-check must refuse it)."""

  class BatchCentre(K.layers.Layer):

    def call(self, inputs):
      return inputs - tf.reduce_mean(inputs, axis=0, keepdims=True)

  model = helpers.build_model(K, "dense")
  model = K.Sequential([K.layers.Input((6,)), BatchCentre()] +
                       list(model.layers))
  model = tf_dp.keras.make_private(model)
  model.compile(optimizer=tf_dp.DPOptimizer(
      K.optimizers.SGD(0.1), 1.0, 1.0, population_size=N, **dp_kwargs),
                loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  return model


def _every_fit_input(K, x, y):
  """Every kind of input fit accepts (name, fit kwargs)."""

  def generator():
    while True:
      for i in range(0, N, BATCH):
        yield x[i:i + BATCH], y[i:i + BATCH]

  base = getattr(K.utils, "PyDataset", None) or K.utils.Sequence

  class Batches(base):

    def __len__(self):
      return N // BATCH

    def __getitem__(self, i):
      return x[i * BATCH:(i + 1) * BATCH], y[i * BATCH:(i + 1) * BATCH]

  return {
      "arrays": dict(x=x, y=y, batch_size=BATCH),
      "dataset": dict(x=tf.data.Dataset.from_tensor_slices((x, y)).batch(
          BATCH)),
      "generator": dict(x=generator(), steps_per_epoch=N // BATCH),
      base.__name__: dict(x=Batches()),
  }


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("given",
                         ["arrays", "dataset", "generator", "batches"])
def test_the_self_check_runs_on_every_input_kind(K, given):
  """A layer that mixes examples is refused before any step whatever fit
  is given (it trained unseen on a generator and a PyDataset, with one
  example moving the update by 4.5 x 2C)."""
  x, y = helpers.make_data("dense", N)
  model = _batch_centring_model(K)
  inputs = _every_fit_input(K, x, y)
  kwargs = inputs[given] if given in inputs else list(inputs.values())[-1]
  before = helpers.weights(model)
  with pytest.raises(tf_dp.keras.privacy_check.PrivacyCheckError):
    model.fit(epochs=1, verbose=0, **kwargs)
  for a, b in zip(before, helpers.weights(model)):
    np.testing.assert_array_equal(a, b)
  assert helpers.ledger_samples(model) == []


@pytest.mark.parametrize("K", KERAS)
def test_a_generator_trains_on_every_batch_after_the_self_check(K):
  """The self-check reads the generator's first batch and gives it back:
  fit trains on all of them (one lot per batch, q = BATCH / N)."""
  x, y = helpers.make_data("dense", N)
  model = helpers.compile_dp(K, helpers.build_model(K, "dense"), N,
                             learning_rate=0.5)

  def generator():
    for i in range(0, N, BATCH):
      yield x[i:i + BATCH], y[i:i + BATCH]

  model.fit(generator(), epochs=1, verbose=0)
  assert [s["sampling_probability"] for s in helpers.ledger_samples(model)] == [
      pytest.approx(BATCH / N)] * (N // BATCH)


def test_an_input_the_self_check_cannot_read_is_refused():
  """Any other input (here an iterable that is not an iterator) is
  refused with the reason while the self-check is on."""
  model = _batch_centring_model(KERAS[0].values[0])

  class Opaque:

    def __iter__(self):
      return iter(())

  with pytest.raises(ValueError, match="could not read the first batch"):
    model.fit(Opaque(), epochs=1, verbose=0)


@pytest.mark.parametrize("K", KERAS)
def test_padding_rows_do_not_hide_a_mixing_layer(K):
  """A Poisson dataset whose first lot drew no example: its rows are all
  padding, copies of one example with weight 0, so the check's neighbour
  (one row replaced by another) equals the batch. Checked on them the
  batch-centring layer passed and trained; the check reads examples of
  positive weight from the next lots and refuses it."""
  x, y = helpers.make_data("dense", N)
  index = np.concatenate([np.zeros(BATCH, np.int64),
                          np.arange(BATCH, 3 * BATCH)])
  weight = np.concatenate([np.zeros(BATCH),
                           np.ones(2 * BATCH)]).astype("float32")
  lots = tf.data.Dataset.from_tensor_slices(
      (x[index], y[index], weight)).batch(BATCH)
  lots = tf_dp.data.declare_sampling(lots, "poisson", BATCH / N)
  model = _batch_centring_model(K, sampling="poisson",
                                sampling_probability=BATCH / N)
  before = helpers.weights(model)
  with pytest.raises(tf_dp.keras.privacy_check.PrivacyCheckError):
    model.fit(lots, epochs=1, verbose=0)
  for a, b in zip(before, helpers.weights(model)):
    np.testing.assert_array_equal(a, b)
  assert helpers.ledger_samples(model) == []


@pytest.mark.parametrize("K", KERAS)
def test_lots_that_drew_nobody_do_not_skip_the_self_check(K):
  """A sampler draws fresh lots on every iteration: that the lots the
  self-check reads are empty says nothing about those fit trains on. With
  seed 70, the 2 lots of q = 0.01 over 40 examples drew nobody on the
  first iteration and 2 examples each on the second (fit's): checked on
  the empty ones the batch-centring layer trained; the check reads lots
  until it holds examples and refuses it."""
  x, y = helpers.make_data("dense", N)
  lots = tf_dp.data.poisson_sampled_batches(x, y, 0.01, 2, seed=70)
  model = _batch_centring_model(K, sampling="poisson",
                                sampling_probability=0.01)
  before = helpers.weights(model)
  with pytest.warns(UserWarning, match="seed=70"):
    with pytest.raises(tf_dp.keras.privacy_check.PrivacyCheckError):
      model.fit(lots, epochs=1, verbose=0)
  for a, b in zip(before, helpers.weights(model)):
    np.testing.assert_array_equal(a, b)
  assert helpers.ledger_samples(model) == []
