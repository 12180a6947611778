"""``fit`` of a converted model trains on lots of the declared sampling only.

Keras batches arrays itself (shuffled once per epoch, or in order): that is
``sampling="shuffled"``. Lots declared ``"fixed_size"`` or ``"poisson"``
come from tf_dp's samplers, as a dataset marked with how it was drawn (or
one marked with ``tf_dp.data.declare_sampling``); ``fit`` on anything else
under those samplings, or on a marked dataset that disagrees with the
optimizer, is refused before any step, so no weight changes and the ledger
stays empty.
"""

import warnings

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
  _assert_refused_before_any_step(
      model, _weights(model),
      lambda: model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0),
      f"sampling={sampling!r}",
      'sampling="shuffled"',  # fix: train arrays under shuffled sampling
      SAMPLERS[sampling])  # fix: the sampler's dataset


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


def _assert_refused_before_any_step(model, before, fit, *patterns):
  with pytest.raises(ValueError) as refusal:
    fit()
  for pattern in patterns:
    assert pattern in str(refusal.value), str(refusal.value)
  for a, b in zip(before, _weights(model)):
    np.testing.assert_array_equal(a, b)
  assert _samples(model) == []
  assert int(model.optimizer.ledger.sample_count.numpy()) == 0
  assert int(model.optimizer.iterations.numpy()) == 0


def _unmarked_inputs(x, y):
  """What a user may pass fit that no sampler drew (name, fit kwargs)."""
  shuffled = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(N).batch(
      BATCH)
  sampled = tf_dp.data.poisson_sampled_batches(x, y, BATCH / N, 3, seed=2)

  def generator():
    for i in range(0, N, BATCH):
      yield x[i:i + BATCH], y[i:i + BATCH]

  return {
      "shuffled dataset": (dict(x=shuffled), "without a sampling mark"),
      "derived dataset": (dict(x=sampled.prefetch(1)),
                          "derived from a sampler's"),
      "mapped dataset": (dict(x=sampled.map(lambda *b: b)),
                         "derived from a sampler's"),
      "generator": (dict(x=generator(), steps_per_epoch=N // BATCH),
                    "a generator, which carries no sampling mark"),
  }


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("sampling", ["fixed_size", "poisson"])
@pytest.mark.parametrize("given", ["shuffled dataset", "derived dataset",
                                   "mapped dataset", "generator"])
def test_unmarked_datasets_are_refused_for_sampled_lots(K, sampling, given):
  x, y = helpers.make_data("dense", N)
  model = _private(K, sampling)
  fit_kw, said = _unmarked_inputs(x, y)[given]
  _assert_refused_before_any_step(
      model, _weights(model), lambda: model.fit(epochs=1, verbose=0,
                                                **fit_kw),
      f"sampling={sampling!r}", said, SAMPLERS[sampling],
      "tf_dp.data.declare_sampling", 'sampling="shuffled"')


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("sampler", ["fixed_size", "poisson"])
def test_a_samplers_dataset_is_refused_under_shuffled_sampling(K, sampler):
  x, y = helpers.make_data("dense", N)
  model = _private(K, "shuffled")
  if sampler == "poisson":
    data = tf_dp.data.poisson_sampled_batches(x, y, BATCH / N, 3, seed=2)
  else:
    data = tf_dp.data.fixed_size_sampled_batches(x, y, BATCH, 3, seed=2)
  _assert_refused_before_any_step(
      model, _weights(model), lambda: model.fit(data, verbose=0),
      f"sampling={sampler!r}", "sampling='shuffled'")


@pytest.mark.parametrize("K", KERAS)
def test_a_poisson_dataset_of_another_q_is_refused(K):
  x, y = helpers.make_data("dense", N)
  model = _private(K, "poisson")  # q = BATCH / N = 0.25
  data = tf_dp.data.poisson_sampled_batches(x, y, 0.5, 3, seed=2)
  _assert_refused_before_any_step(
      model, _weights(model), lambda: model.fit(data, verbose=0),
      "sampling_probability=0.5", "sampling_probability=0.25")


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("sampling", ["fixed_size", "poisson"])
def test_lots_split_otherwise_than_the_optimizer_accumulates_are_refused(
    K, sampling):
  """A lot of k independent draws could hold an example k times: its
  sensitivity would be k clips, not one."""
  x, y = helpers.make_data("dense", N)
  model = tf_dp.keras.make_private(helpers.build_model(K, "dense"))
  kwargs = (dict(sampling_probability=BATCH / N) if sampling == "poisson"
            else {})
  model.compile(optimizer=tf_dp.DPOptimizer(
      K.optimizers.SGD(0.5), l2_norm_clip=1.0, noise_multiplier=1.0,
      population_size=N, sampling=sampling, gradient_accumulation_steps=2,
      **kwargs), loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  if sampling == "poisson":
    data = tf_dp.data.poisson_sampled_batches(x, y, BATCH / N, 4, seed=2)
  else:
    data = tf_dp.data.fixed_size_sampled_batches(x, y, BATCH // 2, 4, seed=2)
  _assert_refused_before_any_step(
      model, _weights(model), lambda: model.fit(data, verbose=0),
      "batches_per_lot=1", "gradient_accumulation_steps=2")
  if sampling == "poisson":
    data = tf_dp.data.poisson_sampled_batches(x, y, BATCH / N, 2, seed=2,
                                              batches_per_lot=2)
  else:
    data = tf_dp.data.fixed_size_sampled_batches(x, y, BATCH // 2, 2, seed=2,
                                                 batches_per_lot=2)
  model.fit(data, verbose=0)
  assert len(_samples(model)) == 2


@pytest.mark.parametrize("K", KERAS)
def test_lots_drawn_from_another_population_are_refused(K):
  x, y = helpers.make_data("dense", N)
  model = _private(K, "fixed_size")  # population_size=N
  data = tf_dp.data.fixed_size_sampled_batches(x[:20], y[:20], BATCH, 2,
                                               seed=2)
  _assert_refused_before_any_step(
      model, _weights(model), lambda: model.fit(data, verbose=0),
      "n = 20", f"population_size={N}")


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("sampling", ["fixed_size", "poisson"])
def test_a_declared_dataset_trains_and_is_recorded_as_declared(K, sampling):
  x, y = helpers.make_data("dense", N)
  model = _private(K, sampling)
  q = BATCH / N if sampling == "poisson" else None
  own = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH).take(2)
  data = tf_dp.data.declare_sampling(own, sampling, q)
  assert data is own
  before = _weights(model)
  model.fit(data, verbose=0)
  samples = _samples(model)
  assert len(samples) == 2
  assert {s["sampling"] for s in samples} == {sampling}
  assert all(s["sampling_probability"] == pytest.approx(BATCH / N)
             for s in samples)
  assert not np.allclose(before[0], _weights(model)[0])


@pytest.mark.parametrize("K", KERAS)
def test_an_unmarked_dataset_under_shuffled_sampling_is_unaffected(K):
  x, y = helpers.make_data("dense", N)
  model = _private(K, "shuffled")
  data = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(N).batch(BATCH)
  model.fit(data, epochs=1, verbose=0)
  samples = _samples(model)
  assert len(samples) == N // BATCH
  assert {s["sampling"] for s in samples} == {"shuffled"}


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("sampling", ["fixed_size", "poisson", "shuffled"])
def test_train_on_batch_trains_only_under_shuffled_sampling(K, sampling):
  """One batch carries no mark: it cannot be a Poisson or fixed-size lot."""
  x, y = helpers.make_data("dense", N)
  model = _private(K, sampling)
  if sampling == "shuffled":
    model.train_on_batch(x[:BATCH], y[:BATCH])
    assert len(_samples(model)) == 1
    return
  _assert_refused_before_any_step(
      model, _weights(model),
      lambda: model.train_on_batch(x[:BATCH], y[:BATCH]),
      f"sampling={sampling!r}", "train_on_batch was given one batch",
      "DPOptimizer.private_step")


@pytest.mark.parametrize("K", KERAS)
def test_a_model_that_overrides_fit_is_checked_as_keras_reads_the_call(K):
  """A subclass ``fit(self, *args, **kwargs)``: x is still found (the
  sampler's dataset trains; arrays are refused)."""

  class Logged(K.Sequential):

    def fit(self, *args, **kwargs):  # pylint: disable=useless-parent-delegation
      return super().fit(*args, **kwargs)

  x, y = helpers.make_data("dense", N)
  model = tf_dp.keras.make_private(Logged(
      [K.layers.Input((6,)), K.layers.Dense(3)]))
  model.compile(optimizer=tf_dp.DPOptimizer(
      K.optimizers.SGD(0.5), l2_norm_clip=1.0, noise_multiplier=1.0,
      population_size=N, sampling="poisson", sampling_probability=BATCH / N),
      loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  with pytest.raises(ValueError, match="arrays or tensors"):
    model.fit(x, y, batch_size=BATCH, verbose=0)
  model.fit(tf_dp.data.poisson_sampled_batches(x, y, BATCH / N, 2), verbose=0)
  assert len(_samples(model)) == 2


@pytest.mark.parametrize("K", KERAS[:1])
def test_lots_of_a_fixed_seed_train_with_a_warning(K):
  x, y = helpers.make_data("dense", N)
  model = _private(K, "poisson")
  with pytest.warns(UserWarning, match="seed=7: every dataset built with"):
    model.fit(tf_dp.data.poisson_sampled_batches(x, y, BATCH / N, 2, seed=7),
              verbose=0)
  assert len(_samples(model)) == 2


@pytest.mark.parametrize("K", KERAS)
def test_lots_are_checked_against_the_n_the_ledger_records(K):
  """A ledger whose n was changed after compile would record the sampler's
  lots with that n (q = lot / n): refused before any step."""
  x, y = helpers.make_data("dense", N)
  ledger = tf_dp.PrivacyLedger(N, BATCH / N, sampling="fixed_size")
  model = tf_dp.keras.make_private(helpers.build_model(K, "dense"))
  model.compile(optimizer=tf_dp.DPOptimizer(
      K.optimizers.SGD(0.5), l2_norm_clip=1.0, noise_multiplier=1.0,
      ledger=ledger), loss=K.losses.SparseCategoricalCrossentropy(
          from_logits=True))
  ledger.set_sample_size(population_size=100 * N)
  data = tf_dp.data.fixed_size_sampled_batches(x, y, BATCH, 2)
  _assert_refused_before_any_step(
      model, _weights(model), lambda: model.fit(data, verbose=0),
      f"n = {N}", f"records population_size={100 * N}")
  ledger.set_sample_size(population_size=N)
  model.fit(data, verbose=0)
  assert [s["population_size"] for s in _samples(model)] == [N, N]


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("sampling", ["fixed_size", "poisson"])
def test_a_lot_left_open_by_a_fit_is_discarded_by_the_next(K, sampling):
  """A lot must be one draw: the half of a lot that one fit leaves open is
  never completed by the batches of another draw."""
  x, y = helpers.make_data("dense", N)
  model = tf_dp.keras.make_private(helpers.build_model(K, "dense"))
  q = BATCH / N
  kwargs = dict(sampling_probability=q) if sampling == "poisson" else {}
  model.compile(optimizer=tf_dp.DPOptimizer(
      K.optimizers.SGD(0.5), l2_norm_clip=1.0, noise_multiplier=1.0,
      population_size=N, sampling=sampling, gradient_accumulation_steps=2,
      **kwargs), loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))

  def lots(count):
    if sampling == "poisson":
      return tf_dp.data.poisson_sampled_batches(x, y, q, count,
                                                batches_per_lot=2)
    return tf_dp.data.fixed_size_sampled_batches(x, y, BATCH // 2, count,
                                                 batches_per_lot=2)

  model.fit(lots(4), steps_per_epoch=3, verbose=0)  # 1 lot, 1 batch open
  engine = model.optimizer.dp_engine
  assert len(_samples(model)) == 1
  assert int(engine.batches_in_lot.numpy()) == 1
  with pytest.warns(UserWarning, match="left open by an earlier fit"):
    model.fit(lots(1), verbose=0)
  assert len(_samples(model)) == 2
  assert int(engine.batches_in_lot.numpy()) == 0


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
  before = _weights(model)
  with pytest.raises(tf_dp.keras.privacy_check.PrivacyCheckError):
    model.fit(epochs=1, verbose=0, **kwargs)
  for a, b in zip(before, _weights(model)):
    np.testing.assert_array_equal(a, b)
  assert _samples(model) == []


@pytest.mark.parametrize("K", KERAS)
def test_a_generator_trains_on_every_batch_after_the_self_check(K):
  """The self-check reads the generator's first batch and gives it back:
  fit trains on all of them (one lot per batch, q = BATCH / N)."""
  x, y = helpers.make_data("dense", N)
  model = _private(K, "shuffled")

  def generator():
    for i in range(0, N, BATCH):
      yield x[i:i + BATCH], y[i:i + BATCH]

  model.fit(generator(), epochs=1, verbose=0)
  assert [s["sampling_probability"] for s in _samples(model)] == [
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
def test_accumulated_lots_never_straddle_two_passes_over_arrays(K):
  """40 arrays in batches of 10: 4 batches per pass. With lots of 3
  batches and steps_per_epoch=6 (a multiple of 3), Keras 2 feeds one
  iterator over reshuffled passes, so the second lot took the last batch
  of one pass and two of the next (an example could count twice): refused
  before any step. Lots of 2 batches start every pass and train."""
  x, y = helpers.make_data("dense", N)
  model = tf_dp.keras.make_private(helpers.build_model(K, "dense"),
                                   self_check=False)
  model.compile(optimizer=tf_dp.DPOptimizer(
      K.optimizers.SGD(0.1), 1.0, 1.0, population_size=N,
      gradient_accumulation_steps=3),
                loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  _assert_refused_before_any_step(
      model, _weights(model),
      lambda: model.fit(x, y, batch_size=BATCH, steps_per_epoch=6, epochs=2,
                        verbose=0),
      "4 batches per pass", "gradient_accumulation_steps=3")
  model = tf_dp.keras.make_private(helpers.build_model(K, "dense"),
                                   self_check=False)
  model.compile(optimizer=tf_dp.DPOptimizer(
      K.optimizers.SGD(0.1), 1.0, 1.0, population_size=N,
      gradient_accumulation_steps=2),
                loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  model.fit(x, y, batch_size=BATCH, steps_per_epoch=2, epochs=2, verbose=0)
  assert [s["sampling_probability"] for s in _samples(model)] == [
      pytest.approx(2 * BATCH / N)] * 2


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
  before = _weights(model)
  with pytest.raises(tf_dp.keras.privacy_check.PrivacyCheckError):
    model.fit(lots, epochs=1, verbose=0)
  for a, b in zip(before, _weights(model)):
    np.testing.assert_array_equal(a, b)
  assert _samples(model) == []


def _poisson_model(K, n, q, metrics, **compile_kwargs):
  """A dense model under Poisson lots that does not move (learning rate 0),
  so that the reported metrics can be recomputed from its predictions."""
  model = tf_dp.keras.make_private(helpers.build_model(K, "dense"))
  model.compile(optimizer=tf_dp.DPOptimizer(
      K.optimizers.SGD(0.0), l2_norm_clip=1.0, noise_multiplier=1.0,
      population_size=n, sampling="poisson", sampling_probability=q),
                loss=K.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=metrics, **compile_kwargs)
  return model


def _poisson_lots(x, y, q, lots):
  """Poisson lots drawn once (the sampler's, seed 5), as a dataset marked
  with their sampling whose every iteration yields these same lots: fit
  trains on exactly the lots the test reads."""
  drawn = list(tf_dp.data.poisson_sampled_batches(x, y, q, lots, seed=5))
  stacked = tuple(np.stack([b[k].numpy() for b in drawn]) for k in range(3))
  data = tf_dp.data.declare_sampling(
      tf.data.Dataset.from_tensor_slices(stacked), "poisson", q,
      population_size=len(x))
  present = stacked[2] > 0
  return data, stacked[0][present], stacked[1][present], stacked[2].size


@pytest.mark.parametrize("K", KERAS)
def test_poisson_padding_is_never_counted_in_the_reported_metrics(K):
  n, q, lots = 64, 0.25, 6
  x, y = helpers.make_data("dense", n)
  model = _poisson_model(K, n, q, ["accuracy"])
  data, inputs, labels, rows = _poisson_lots(x, y, q, lots)
  assert rows > 2 * len(labels)  # About 36 padding rows of 52 a lot.
  history = model.fit(data, verbose=0)
  logits = model.predict(inputs, verbose=0)
  truth = np.mean(np.argmax(logits, -1) == labels)
  # Padding rows hold zeros, label 0: counted, they move the accuracy.
  padding_right = np.argmax(model.predict(x[:1] * 0, verbose=0)) == 0
  with_padding = (truth * len(labels) + padding_right * (
      rows - len(labels))) / rows
  assert abs(with_padding - truth) > 0.1
  assert history.history["accuracy"][0] == pytest.approx(truth, abs=1e-6)
  # The loss too is the mean over the drawn examples.
  losses = -np.log(np.exp(logits[np.arange(len(labels)), labels]) /
                   np.exp(logits).sum(-1))
  assert history.history["loss"][0] == pytest.approx(
      np.mean(losses), rel=1e-5)


def _fixed_lots(stacked, q, n, weight_factor=None):
  """``stacked`` lots as a marked dataset, weights times ``weight_factor``
  of each row's label (None: as drawn)."""
  x, y, w = stacked
  if weight_factor is not None:
    w = w * weight_factor[y]
  return tf_dp.data.declare_sampling(
      tf.data.Dataset.from_tensor_slices((x, y, w)), "poisson", q,
      population_size=n)


@pytest.mark.parametrize("K", KERAS)
def test_class_weights_fold_into_the_weights_of_poisson_lots(K):
  n, q = 64, 0.25
  x, y = helpers.make_data("dense", n)
  drawn = list(tf_dp.data.poisson_sampled_batches(x, y, q, 3, seed=5))
  stacked = tuple(np.stack([b[k].numpy() for b in drawn]) for k in range(3))
  class_weight = {0: 3.0, 1: 0.25}  # Class 2 keeps weight 1, as in Keras.

  def trained(data, **fit_kwargs):
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", UserWarning)  # noise_multiplier=0.
      model = helpers.compile_dp(K, helpers.build_model(K, "dense"), n,
                                 learning_rate=0.5, noise_multiplier=0.0,
                                 sampling="poisson", sampling_probability=q)
    model.fit(data, verbose=0, **fit_kwargs)
    assert int(model.optimizer.ledger.sample_count) == 3
    return _weights(model)

  weighted = trained(_fixed_lots(stacked, q, n),
                     class_weight=class_weight)
  reference = trained(_fixed_lots(stacked, q, n,
                                  np.array([3.0, 0.25, 1.0], "float32")))
  unweighted = trained(_fixed_lots(stacked, q, n))
  for got, want in zip(weighted, reference):
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
  assert max(np.abs(a - b).max() for a, b in zip(weighted, unweighted)) > 1e-3
