"""population_size: given, or inferred from the arrays that fit trains on."""

import warnings

import numpy as np
import pytest
import tensorflow as tf

import tf_dp
from tests.keras import helpers

KERAS = helpers.keras_modules()


def _private(K, **dp_kwargs):
  model = tf_dp.keras.make_private(helpers.build_model(K, "dense"))
  model.compile(
      optimizer=tf_dp.DPOptimizer(K.optimizers.SGD(0.1), l2_norm_clip=1.0,
                                  noise_multiplier=1.0, **dp_kwargs),
      loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  return model


def _samples(model):
  return model.optimizer.ledger.to_dict()["samples"]


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("split,expected_n", [(0.0, 103), (0.2, 82)])
def test_inferred_from_fit_arrays_less_the_validation_split(K, split,
                                                            expected_n):
  """Keras trains on the first floor(103 * 0.8) = 82 examples; q of a
  batch of 10 is 10 / 82, and the short last batch 2 / 82."""
  x, y = helpers.make_data("dense", 103)
  model = _private(K)
  model.fit(x, y, batch_size=10, epochs=1, validation_split=split,
            verbose=0)
  samples = _samples(model)
  # The fit's samples record its n; the n itself ended with the fit.
  assert model.optimizer.dp_config.population_size is None
  assert len(samples) == -(-expected_n // 10)
  assert {s["population_size"] for s in samples} == {expected_n}
  assert samples[0]["sampling_probability"] == pytest.approx(
      10 / expected_n)
  assert samples[-1]["sampling_probability"] == pytest.approx(
      (expected_n % 10 or 10) / expected_n)


@pytest.mark.parametrize("K", KERAS)
def test_inferred_from_a_dict_of_tensors(K):
  x, y = helpers.make_data("dense", 40)
  inputs = K.layers.Input((6,), name="features")
  model = K.Model(inputs, K.layers.Dense(3)(inputs))
  model = tf_dp.keras.make_private(model)
  model.compile(tf_dp.DPOptimizer(K.optimizers.SGD(0.1), 1.0, 1.0),
                K.losses.SparseCategoricalCrossentropy(from_logits=True))
  model.fit({"features": tf.constant(x)}, tf.constant(y), batch_size=8,
            verbose=0)
  assert {s["population_size"] for s in _samples(model)} == {40}


@pytest.mark.parametrize("K", KERAS)
def test_a_dataset_of_unknown_size_still_needs_it(K):
  x, y = helpers.make_data("dense", 16)
  model = _private(K)
  before = [w.copy() for w in model.get_weights()]
  data = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
  with pytest.raises(ValueError, match=r"population_size=len\(x_train\)"):
    model.fit(data, epochs=1, verbose=0)
  for a, b in zip(before, model.get_weights()):
    np.testing.assert_array_equal(a, b)
  assert _samples(model) == []


@pytest.mark.parametrize("K", KERAS)
def test_custom_loop_still_needs_it(K):
  x, y = helpers.make_data("dense", 8)
  model = tf_dp.keras.make_private(helpers.build_model(K, "dense"))
  optimizer = tf_dp.DPOptimizer(K.optimizers.SGD(0.1), 1.0, 1.0)
  with pytest.raises(ValueError, match="population_size is unknown"):
    optimizer.private_step(model, "sparse_categorical_crossentropy", x, y)


@pytest.mark.parametrize("K", KERAS)
def test_a_given_population_size_wins_and_warns_when_larger(K):
  """An n larger than the training set understates epsilon unless the set
  was drawn at random from the population: the user is told."""
  x, y = helpers.make_data("dense", 20)
  model = _private(K, population_size=1000)
  with pytest.warns(UserWarning, match="population_size=1000 but fit "
                    "trains on 20 examples"):
    model.fit(x, y, batch_size=10, verbose=0)
  assert {s["population_size"] for s in _samples(model)} == {1000}
  model = _private(K, population_size=20)
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    model.fit(x, y, batch_size=10, verbose=0)


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("split", [0.0, 0.5])
def test_a_given_population_size_smaller_than_the_training_set_is_refused(
    K, split):
  """n is the size of the population the training examples come from, so it
  is at least their number: a smaller n (a typo, the batch size, the number
  of classes) would record lots of 10 from n = 8 as q = 1, an epsilon for
  another data set. Refused before any update, naming both numbers and the
  fix; the validation part does not count."""
  x, y = helpers.make_data("dense", 40)
  model = _private(K, population_size=8)
  before = helpers.weights(model)
  with pytest.raises(tf_dp.errors.SamplingMismatchError,
                     match=r"population_size=8 .* trains on "
                     f"{int(40 * (1 - split))} examples.*"
                     r"population_size=len\(x_train\)"):
    model.fit(x, y, batch_size=10, verbose=0, validation_split=split)
  for a, b in zip(before, helpers.weights(model)):
    np.testing.assert_array_equal(a, b)
  assert not _samples(model)
  model = _private(K, population_size=20)
  model.fit(x, y, batch_size=10, verbose=0, validation_split=0.5)
  assert {s["population_size"] for s in _samples(model)} == {20}


@pytest.mark.parametrize("K", KERAS)
def test_each_fit_records_the_n_it_trains_on(K):
  x, y = helpers.make_data("dense", 30)
  model = _private(K)
  model.fit(x, y, batch_size=10, verbose=0)
  model.fit(x[:20], y[:20], batch_size=10, verbose=0)
  assert [s["population_size"] for s in _samples(model)] == [30] * 3 + [20] * 2


@pytest.mark.parametrize("K", KERAS)
def test_inferred_n_after_save_and_load(K, tmp_path):
  """The loaded optimizer keeps the ledger, not the inferred n (it belonged
  to the fit that inferred it); the next fit on the same arrays infers the
  same n again."""
  x, y = helpers.make_data("dense", 30)
  model = _private(K)
  model.fit(x, y, batch_size=10, verbose=0)
  path = str(tmp_path / "m.keras")
  model.save(path)
  loaded = tf_dp.keras.make_private(K.models.load_model(path))
  assert loaded.optimizer.dp_config.population_size is None
  assert loaded.optimizer.dp_engine.population_size is None
  loaded.fit(x, y, batch_size=10, verbose=0)
  assert [s["population_size"] for s in _samples(loaded)] == [30] * 6


def test_required_where_it_cannot_be_inferred():
  for kwargs in ({"sampling": "fixed_size"},
                 {"sampling": "poisson", "sampling_probability": 0.01}):
    with pytest.raises(ValueError, match="population_size is required"):
      tf_dp.DPOptimizer("sgd", 1.0, 1.0, **kwargs)


def _assert_refused_without_change(model, call):
  """``call()`` raises asking for population_size; no weight and no ledger
  sample changed."""
  before = [w.copy() for w in model.get_weights()]
  samples = _samples(model)
  with pytest.raises(ValueError, match=r"population_size=len\(x_train\)"):
    call()
  for a, b in zip(before, model.get_weights()):
    np.testing.assert_array_equal(a, b)
  assert _samples(model) == samples


@pytest.mark.parametrize("K", KERAS)
def test_an_inferred_n_belongs_to_its_fit(K):
  """n inferred from 100 arrays is not reused by a later fit on 20 examples
  of a tf.data pipeline, train_on_batch or a custom loop (their q would be
  recorded as 10 / 100 instead of 10 / 20): each is refused before any
  update. A later fit on arrays infers its own n."""
  x, y = helpers.make_data("dense", 100)
  model = _private(K)
  model.fit(x, y, batch_size=10, epochs=1, verbose=0)
  assert [s["population_size"] for s in _samples(model)] == [100] * 10
  data = tf.data.Dataset.from_tensor_slices((x[:20], y[:20])).batch(10)
  _assert_refused_without_change(
      model, lambda: model.fit(data, epochs=1, verbose=0))
  _assert_refused_without_change(
      model, lambda: model.train_on_batch(x[:10], y[:10]))
  _assert_refused_without_change(
      model, lambda: model.optimizer.private_step(
          model, "sparse_categorical_crossentropy", x[:10], y[:10]))
  model.fit(x[:20], y[:20], batch_size=10, epochs=1, verbose=0)
  assert [s["population_size"] for s in _samples(model)] == (
      [100] * 10 + [20] * 2)
  assert [s["sampling_probability"] for s in _samples(model)][-2:] == (
      pytest.approx([0.5, 0.5]))


@pytest.mark.parametrize("K", KERAS)
def test_an_inferred_n_is_not_saved_as_known(K, tmp_path):
  """A model saved during (ModelCheckpoint) or after a fit that inferred n
  loads without that n: a fit on a pipeline is refused."""
  x, y = helpers.make_data("dense", 30)
  model = _private(K)
  path = str(tmp_path / "m.keras")
  model.fit(x, y, batch_size=10, verbose=0,
            callbacks=[K.callbacks.ModelCheckpoint(path)])
  loaded = tf_dp.keras.make_private(K.models.load_model(path))
  assert loaded.optimizer.dp_config.population_size is None
  data = tf.data.Dataset.from_tensor_slices((x, y)).batch(10)
  _assert_refused_without_change(
      loaded, lambda: loaded.fit(data, epochs=1, verbose=0))
