"""``fit`` of a converted model trains on lots of the declared sampling only
(``tf_dp.keras.fit_sampling``).

Keras batches arrays itself (shuffled once per epoch, or in order): that is
``sampling="shuffled"``. Lots declared ``"fixed_size"`` or ``"poisson"``
come from tf_dp's samplers, as a dataset marked with how it was drawn (or
one marked with ``tf_dp.data.declare_sampling``); ``fit`` on anything else
under those samplings, or on a marked dataset that disagrees with the
optimizer, is refused before any step, so no weight changes and the ledger
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


def _assert_trains_lots_of(model, data, sampling, lots):
  """fit on ``data`` moves the weights and records ``lots`` lots of
  ``sampling`` with q = BATCH / N."""
  before = helpers.weights(model)
  model.fit(data, verbose=0)
  samples = helpers.ledger_samples(model)
  assert len(samples) == lots
  assert {s["sampling"] for s in samples} == {sampling}
  assert all(s["sampling_probability"] == pytest.approx(BATCH / N)
             for s in samples)
  assert not np.allclose(before[0], helpers.weights(model)[0])


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("sampling", ["fixed_size", "poisson"])
@pytest.mark.parametrize("as_tensors", [False, True])
def test_fit_on_arrays_is_refused_for_sampled_lots(K, sampling, as_tensors):
  x, y = helpers.make_data("dense", N)
  if as_tensors:
    x, y = tf.constant(x), tf.constant(y)
  model = _private(K, sampling)
  _assert_refused_before_any_step(
      model, helpers.weights(model),
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
  _assert_trains_lots_of(model, data, sampling, 3)


@pytest.mark.parametrize("K", KERAS)
def test_fit_on_arrays_with_shuffled_sampling_is_unaffected(K):
  x, y = helpers.make_data("dense", N)
  model = _private(K, "shuffled")
  model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0)
  samples = helpers.ledger_samples(model)
  assert len(samples) == N // BATCH
  assert {s["sampling"] for s in samples} == {"shuffled"}
  assert samples[0]["sampling_probability"] == pytest.approx(BATCH / N)


@pytest.mark.parametrize("K", KERAS)
def test_shuffled_arrays_under_a_global_seed_warn(K):
  """A global seed makes Keras's shuffle the same in every run: whoever
  knows it knows each example's batch, which the ledger counts as random.
  fit warns, as for a sampler's fixed seed; without a global seed it does
  not."""
  import warnings  # pylint: disable=g-import-not-at-top
  x, y = helpers.make_data("dense", N)
  model = _private(K, "shuffled")
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0)
  assert not [w for w in caught if "global random seed" in str(w.message)]
  tf.random.set_seed(3)  # tests/conftest.py unsets it after the test.
  with pytest.warns(UserWarning, match="global random seed set \\(3"):
    model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0)


@pytest.mark.parametrize("K", KERAS[:1])
def test_a_refused_fit_leaves_the_model_ready_for_the_sampler(K):
  x, y = helpers.make_data("dense", N)
  model = _private(K, "fixed_size")
  with pytest.raises(ValueError, match="sampling"):
    model.fit(x, y, batch_size=BATCH, verbose=0)
  model.fit(tf_dp.data.fixed_size_sampled_batches(x, y, BATCH, 2, seed=1),
            verbose=0)
  assert len(helpers.ledger_samples(model)) == 2


def _assert_refused_before_any_step(model, before, fit, *patterns):
  with pytest.raises(ValueError) as refusal:
    fit()
  for pattern in patterns:
    assert pattern in str(refusal.value), str(refusal.value)
  for a, b in zip(before, helpers.weights(model)):
    np.testing.assert_array_equal(a, b)
  assert helpers.ledger_samples(model) == []
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
      model, helpers.weights(model), lambda: model.fit(epochs=1, verbose=0,
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
      model, helpers.weights(model), lambda: model.fit(data, verbose=0),
      f"sampling={sampler!r}", "sampling='shuffled'")


@pytest.mark.parametrize("K", KERAS)
def test_a_poisson_dataset_of_another_q_is_refused(K):
  x, y = helpers.make_data("dense", N)
  model = _private(K, "poisson")  # q = BATCH / N = 0.25
  data = tf_dp.data.poisson_sampled_batches(x, y, 0.5, 3, seed=2)
  _assert_refused_before_any_step(
      model, helpers.weights(model), lambda: model.fit(data, verbose=0),
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
      model, helpers.weights(model), lambda: model.fit(data, verbose=0),
      "batches_per_lot=1", "gradient_accumulation_steps=2")
  if sampling == "poisson":
    data = tf_dp.data.poisson_sampled_batches(x, y, BATCH / N, 2, seed=2,
                                              batches_per_lot=2)
  else:
    data = tf_dp.data.fixed_size_sampled_batches(x, y, BATCH // 2, 2, seed=2,
                                                 batches_per_lot=2)
  model.fit(data, verbose=0)
  assert len(helpers.ledger_samples(model)) == 2


@pytest.mark.parametrize("K", KERAS)
def test_lots_drawn_from_another_population_are_refused(K):
  x, y = helpers.make_data("dense", N)
  model = _private(K, "fixed_size")  # population_size=N
  data = tf_dp.data.fixed_size_sampled_batches(x[:20], y[:20], BATCH, 2,
                                               seed=2)
  _assert_refused_before_any_step(
      model, helpers.weights(model), lambda: model.fit(data, verbose=0),
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
  _assert_trains_lots_of(model, data, sampling, 2)


@pytest.mark.parametrize("K", KERAS)
def test_an_unmarked_dataset_under_shuffled_sampling_is_unaffected(K):
  x, y = helpers.make_data("dense", N)
  model = _private(K, "shuffled")
  data = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(N).batch(BATCH)
  model.fit(data, epochs=1, verbose=0)
  samples = helpers.ledger_samples(model)
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
    assert len(helpers.ledger_samples(model)) == 1
    return
  _assert_refused_before_any_step(
      model, helpers.weights(model),
      lambda: model.train_on_batch(x[:BATCH], y[:BATCH]),
      f"sampling={sampling!r}", "train_on_batch was given one batch",
      "DPOptimizer.private_step")


@pytest.mark.parametrize("K", KERAS)
def test_train_on_batch_is_refused_when_lots_take_several_batches(K):
  """Two train_on_batch calls on the same batch would be recorded as one
  shuffled lot of 2 * BATCH distinct examples (q = 0.5) while each example
  is in it twice: refused before any step, naming fit and private_step."""
  x, y = helpers.make_data("dense", N)
  model = helpers.compile_dp(K, helpers.build_model(K, "dense"), N,
                             gradient_accumulation_steps=2)
  before = helpers.weights(model)
  for _ in range(2):
    _assert_refused_before_any_step(
        model, before, lambda: model.train_on_batch(x[:BATCH], y[:BATCH]),
        "train_on_batch with gradient_accumulation_steps=2",
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
  assert len(helpers.ledger_samples(model)) == 2


@pytest.mark.parametrize("K", KERAS[:1])
def test_lots_of_a_fixed_seed_train_with_a_warning(K):
  x, y = helpers.make_data("dense", N)
  model = _private(K, "poisson")
  with pytest.warns(UserWarning, match="seed=7: every dataset built with"):
    model.fit(tf_dp.data.poisson_sampled_batches(x, y, BATCH / N, 2, seed=7),
              verbose=0)
  assert len(helpers.ledger_samples(model)) == 2


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
      model, helpers.weights(model), lambda: model.fit(data, verbose=0),
      f"n = {N}", f"records population_size={100 * N}")
  ledger.set_sample_size(population_size=N)
  model.fit(data, verbose=0)
  assert [s["population_size"] for s in helpers.ledger_samples(model)] == [N, N]


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
  assert len(helpers.ledger_samples(model)) == 1
  assert int(engine.batches_in_lot.numpy()) == 1
  with pytest.warns(UserWarning, match="left open by an earlier fit"):
    model.fit(lots(1), verbose=0)
  assert len(helpers.ledger_samples(model)) == 2
  assert int(engine.batches_in_lot.numpy()) == 0


def _accumulating(K, k):
  """A dense model whose DP optimizer noises every ``k`` batches together
  (no self-check)."""
  model = tf_dp.keras.make_private(helpers.build_model(K, "dense"))
  model.compile(optimizer=tf_dp.DPOptimizer(
      K.optimizers.SGD(0.1), 1.0, 1.0, population_size=N,
      gradient_accumulation_steps=k),
                loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  return model


@pytest.mark.parametrize("K", KERAS)
def test_accumulated_lots_never_straddle_two_passes_over_arrays(K):
  """40 arrays in batches of 10: 4 batches per pass. With lots of 3
  batches and steps_per_epoch=6 (a multiple of 3), Keras 2 feeds one
  iterator over reshuffled passes, so the second lot took the last batch
  of one pass and two of the next (an example could count twice): refused
  before any step. Lots of 2 batches start every pass and train."""
  x, y = helpers.make_data("dense", N)
  model = _accumulating(K, 3)
  _assert_refused_before_any_step(
      model, helpers.weights(model),
      lambda: model.fit(x, y, batch_size=BATCH, steps_per_epoch=6, epochs=2,
                        verbose=0),
      "4 batches per pass", "gradient_accumulation_steps=3")
  model = _accumulating(K, 2)
  model.fit(x, y, batch_size=BATCH, steps_per_epoch=2, epochs=2, verbose=0)
  assert [s["sampling_probability"] for s in helpers.ledger_samples(model)] == [
      pytest.approx(2 * BATCH / N)] * 2
