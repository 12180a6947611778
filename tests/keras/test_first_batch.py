"""The first batch of ``fit``'s input (``tf_dp.keras.first_batch``): read
without consuming the input, it builds a model that is not built yet; and
whatever ``fit`` is given, a layer that mixes examples is refused before any
step, by the privacy gate on the traced step."""

import numpy as np
import pytest
import tensorflow as tf

import tf_dp
from tests.keras import helpers
from tf_dp.errors import UnsupportedModelError

KERAS = helpers.keras_modules()
N, BATCH = 40, 10


def _batch_centring_model(K, **dp_kwargs):
  """A model with a layer that subtracts the batch mean: one example's
  gradient depends on the others."""

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
  """Every kind of input fit accepts (name, fit kwargs), declared as the
  fixed order they are (the mixing layer is refused whatever the order)."""

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
      "dataset": dict(x=tf.data.Dataset.from_tensor_slices((x, y)).shuffle(
          N).batch(BATCH)),
      "generator": dict(x=generator(), steps_per_epoch=N // BATCH),
      "batches": dict(x=Batches()),
  }


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("given",
                         ["arrays", "dataset", "generator", "batches"])
def test_a_mixing_layer_is_refused_on_every_input_kind(K, given):
  """It trained unseen on a generator and a PyDataset under the first-fit
  check, with one example moving the update by 4.5 x 2C."""
  x, y = helpers.make_data("dense", N)
  model = _batch_centring_model(K, sampling="fixed_order") if given in (
      "generator", "batches") else _batch_centring_model(K)
  before = helpers.weights(model)
  with pytest.raises(UnsupportedModelError, match="combines examples"):
    model.fit(epochs=1, verbose=0, **_every_fit_input(K, x, y)[given])
  for a, b in zip(before, helpers.weights(model)):
    np.testing.assert_array_equal(a, b)
  assert helpers.ledger_samples(model) == []


@pytest.mark.parametrize("K", KERAS)
def test_a_generator_trains_on_every_batch_after_building_the_model(K):
  """The first batch read to build an unbuilt model is given back: fit
  trains on all of them (one lot per batch)."""
  x, y = helpers.make_data("dense", N)
  model = K.Sequential([K.layers.Dense(8, activation="relu"),
                        K.layers.Dense(3)])
  model = helpers.compile_dp(K, model, N, learning_rate=0.5,
                             sampling="fixed_order")

  def generator():
    for i in range(0, N, BATCH):
      yield x[i:i + BATCH], y[i:i + BATCH]

  model.fit(generator(), epochs=1, verbose=0)
  assert model.built
  assert len(helpers.ledger_samples(model)) == N // BATCH
