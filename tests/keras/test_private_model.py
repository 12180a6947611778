"""``fit`` of a converted model trains on lots of the declared sampling only.

Keras batches arrays itself (shuffled once per epoch, or in order): that is
``sampling="shuffled"``. Lots declared ``"fixed_size"`` or ``"poisson"``
come from tf_dp's samplers, as a dataset; ``fit`` on arrays under those
samplings is refused before any step, so no weight changes and the ledger
stays empty.
"""

import numpy as np
import pytest
import tensorflow as tf

import tf_dp
from tests.keras import helpers

KERAS = helpers.keras_modules()
N, BATCH = 40, 10
SAMPLERS = {"fixed_size": "tf_dp.data.fixed_size_sampled_batches",
            "poisson": "tf_dp.data.poisson_sampled_batches"}


def _private(K, sampling):
  kwargs = dict(population_size=N, sampling=sampling)
  if sampling == "poisson":
    kwargs["sampling_probability"] = BATCH / N
  model = tf_dp.keras.make_private(helpers.build_model(K, "dense"))
  model.compile(optimizer=tf_dp.DPOptimizer(
      K.optimizers.SGD(0.5), l2_norm_clip=1.0, noise_multiplier=1.0,
      **kwargs), loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  return model


def _weights(model):
  return [v.numpy().copy() for v in model.trainable_variables]


def _samples(model):
  return model.optimizer.ledger.to_dict()["samples"]


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("sampling", ["fixed_size", "poisson"])
@pytest.mark.parametrize("as_tensors", [False, True])
def test_fit_on_arrays_is_refused_for_sampled_lots(K, sampling, as_tensors):
  x, y = helpers.make_data("dense", N)
  if as_tensors:
    x, y = tf.constant(x), tf.constant(y)
  model = _private(K, sampling)
  before = _weights(model)
  with pytest.raises(ValueError) as refusal:
    model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0)
  message = str(refusal.value)
  assert f"sampling={sampling!r}" in message
  assert 'sampling="shuffled"' in message  # fix 1: train on arrays
  assert SAMPLERS[sampling] in message  # fix 2: the sampler's dataset
  for a, b in zip(before, _weights(model)):
    np.testing.assert_array_equal(a, b)
  assert _samples(model) == []
  assert int(model.optimizer.ledger.sample_count.numpy()) == 0
  assert int(model.optimizer.iterations.numpy()) == 0


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("sampling", ["fixed_size", "poisson"])
def test_the_samplers_datasets_train_with_their_sampling(K, sampling):
  x, y = helpers.make_data("dense", N)
  model = _private(K, sampling)
  if sampling == "poisson":
    data = tf_dp.data.poisson_sampled_batches(x, y, BATCH / N, 3, seed=2)
  else:
    data = tf_dp.data.fixed_size_sampled_batches(x, y, BATCH, 3, seed=2)
  before = _weights(model)
  model.fit(data, epochs=1, verbose=0)
  samples = _samples(model)
  assert len(samples) == 3
  assert {s["sampling"] for s in samples} == {sampling}
  assert all(s["sampling_probability"] == pytest.approx(BATCH / N)
             for s in samples)
  assert not np.allclose(before[0], _weights(model)[0])


@pytest.mark.parametrize("K", KERAS)
def test_fit_on_arrays_with_shuffled_sampling_is_unaffected(K):
  x, y = helpers.make_data("dense", N)
  model = _private(K, "shuffled")
  model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0)
  samples = _samples(model)
  assert len(samples) == N // BATCH
  assert {s["sampling"] for s in samples} == {"shuffled"}
  assert samples[0]["sampling_probability"] == pytest.approx(BATCH / N)


@pytest.mark.parametrize("K", KERAS[:1])
def test_a_refused_fit_leaves_the_model_ready_for_the_sampler(K):
  x, y = helpers.make_data("dense", N)
  model = _private(K, "fixed_size")
  with pytest.raises(ValueError, match="sampling"):
    model.fit(x, y, batch_size=BATCH, verbose=0)
  model.fit(tf_dp.data.fixed_size_sampled_batches(x, y, BATCH, 2, seed=1),
            verbose=0)
  assert len(_samples(model)) == 2
