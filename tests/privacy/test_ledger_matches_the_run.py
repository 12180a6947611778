"""The ledger says what each lot really was, on every path a user reaches.

Each test trains a model that makes every lot visible: example ``i`` is the
one-hot vector ``e_i``, the model is one bias-free ``Dense(1)`` and the loss
is the absolute error against -1, so each example's gradient is ``e_i``
(norm 1, under the clip bound of 10) and, with no noise, one lot's update
is ``-lr / d * (sum of e_i over the lot)`` for the lot's denominator d. The
kernel after each batch therefore shows which examples each lot held and
how often. For every lot the tests check what the accountant relies on:

* no example is in a lot twice (every nonzero entry of the update is the
  same), so its contribution is one clipped gradient;
* the ledger has one sample per lot, in order, recording the n of the
  data that ``fit`` trained on and ``q = lot size / n`` for shuffled lots
  (a lot of m distinct examples out of n);
* a lot of shuffled arrays lies within one pass over them.

The matrix covers the ways a user reaches ``fit`` by accident as well as
on purpose: every input kind (arrays, ``tf.data``, a generator, a
``PyDataset``/``Sequence``), several fits in a row on different data,
``initial_epoch``, ``steps_per_epoch`` with lots of several batches, a
short last batch, save and reload between fits; on both Keras flavours.
"""

import numpy as np
import pytest
import tensorflow as tf

import tf_dp
from tests.keras import helpers
from tf_dp.errors import SamplingMismatchError
from tf_dp.keras import backend

KERAS = helpers.keras_modules()
N = 13
BATCH = 5
LR = 0.01


def _data(n=N):
  return np.eye(N, dtype="float32")[:n], -np.ones((n, 1), "float32")


def _model(K, **dp_kwargs):
  model = K.Sequential([K.Input((N,)), K.layers.Dense(
      1, use_bias=False, kernel_initializer="zeros")])
  model = tf_dp.keras.make_private(model)
  model.compile(optimizer=tf_dp.DPOptimizer(
      K.optimizers.SGD(LR), l2_norm_clip=10.0, noise_multiplier=0.0,
      **dp_kwargs), loss="mae")
  return model


class _Lots:
  """Records the kernel after every batch and splits the run into lots."""

  def __init__(self, K, model):
    self.kernels = [model.layers[-1].kernel.numpy()[:, 0].copy()]
    self.callback = K.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs=None: self.kernels.append(
            model.layers[-1].kernel.numpy()[:, 0].copy()))

  def lots(self):
    """Each update's multiset of examples, as a count per example."""
    out = []
    for before, after in zip(self.kernels, self.kernels[1:]):
      step = before - after
      if not np.any(step):
        continue  # A batch that ends no lot.
      assert np.all(step >= -1e-9), step
      unit = step[step > 1e-9].min()
      counts = step / unit
      np.testing.assert_allclose(counts, np.round(counts), atol=1e-4)
      out.append(np.round(counts).astype(int))
    return out


def _samples(model):
  return model.optimizer.ledger.to_dict()["samples"]


def _check(lots, samples, n, sampling="shuffled"):
  """Every lot holds distinct examples and has its sample, in order."""
  assert len(samples) == len(lots), (len(samples), len(lots))
  for counts, sample in zip(lots, samples):
    assert counts.max() == 1, f"an example is in one lot {counts.max()} times"
    assert counts[n:].sum() == 0, "a lot holds an example not in the data"
    assert sample["population_size"] == n
    assert sample["sampling"] == sampling
    assert sample["sampling_probability"] == pytest.approx(counts.sum() / n)


def _check_passes(lots, n, lots_per_pass):
  """Shuffled lots of arrays: each pass holds every example exactly once."""
  assert len(lots) % lots_per_pass == 0
  for start in range(0, len(lots), lots_per_pass):
    np.testing.assert_array_equal(
        sum(lots[start:start + lots_per_pass])[:n], np.ones(n, int))


def _fit(model, lots, **kwargs):
  model.fit(verbose=0, callbacks=[lots.callback], **kwargs)


@pytest.mark.parametrize("K", KERAS)
def test_arrays_with_a_short_last_batch(K):
  x, y = _data()
  model = _model(K)
  lots = _Lots(K, model)
  _fit(model, lots, x=x, y=y, batch_size=BATCH, epochs=2)
  _check(lots.lots(), _samples(model), N)
  _check_passes(lots.lots(), N, 3)


@pytest.mark.parametrize("K", KERAS)
def test_initial_epoch(K):
  x, y = _data()
  model = _model(K)
  lots = _Lots(K, model)
  _fit(model, lots, x=x, y=y, batch_size=BATCH, epochs=3, initial_epoch=1)
  assert len(lots.lots()) == 2 * 3
  _check(lots.lots(), _samples(model), N)
  _check_passes(lots.lots(), N, 3)


@pytest.mark.parametrize("K", KERAS)
def test_lots_of_two_batches_with_steps_per_epoch(K):
  """9 examples in batches of 3 make 3 batches per pass; lots of 2 batches
  would straddle passes: refused before any update. 12 examples make 4
  batches per pass: lots of 2 batches, 2 lots per pass."""
  x, y = _data(9)
  model = _model(K, gradient_accumulation_steps=2)
  with pytest.raises(ValueError, match="gradient_accumulation_steps=2"):
    model.fit(x, y, batch_size=3, steps_per_epoch=4, epochs=3, verbose=0)
  assert _samples(model) == []
  x, y = _data(12)
  lots = _Lots(K, model)
  _fit(model, lots, x=x, y=y, batch_size=3, steps_per_epoch=4, epochs=3)
  assert len(lots.lots()) == 6
  _check(lots.lots(), _samples(model), 12)
  _check_passes(lots.lots(), 12, 2)


@pytest.mark.parametrize("K", KERAS)
def test_two_fits_in_a_row_on_different_arrays(K):
  x, y = _data()
  model = _model(K)
  lots = _Lots(K, model)
  _fit(model, lots, x=x, y=y, batch_size=BATCH, epochs=1)
  first = len(lots.lots())
  _fit(model, lots, x=x[:7], y=y[:7], batch_size=BATCH, epochs=1)
  samples = _samples(model)
  _check(lots.lots()[:first], samples[:first], N)
  _check(lots.lots()[first:], samples[first:], 7)


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("kind", ["dataset", "generator", "batches"])
def test_pipelines_with_a_given_population_size(K, kind):
  """tf.data, a generator and a PyDataset (Sequence on Keras 2) of
  shuffled batches: q = batch / n from the given n, every lot distinct.
  tf_dp cannot read a generator's or a PyDataset's order: under
  "shuffled" they are refused before any step, and train when the order
  is declared fixed (each pass accounted without amplification)."""
  x, y = _data()
  rng = np.random.default_rng(0)

  def generator():
    while True:
      order = rng.permutation(N)
      for i in range(0, N, BATCH):
        yield x[order[i:i + BATCH]], y[order[i:i + BATCH]]

  base = getattr(K.utils, "PyDataset", None) or K.utils.Sequence

  class Batches(base):

    def __len__(self):
      return -(-N // BATCH)

    def __getitem__(self, i):
      return x[i * BATCH:(i + 1) * BATCH], y[i * BATCH:(i + 1) * BATCH]

  fit_input = {
      "dataset": dict(x=tf.data.Dataset.from_tensor_slices((x, y)).shuffle(
          N, seed=1).batch(BATCH)),
      "generator": dict(x=generator(), steps_per_epoch=3),
      "batches": dict(x=Batches()),
  }[kind]
  sampling = "shuffled"
  if kind != "dataset":
    model = _model(K, population_size=N)
    with pytest.raises(SamplingMismatchError,
                       match="cannot read"):
      _fit(model, _Lots(K, model), epochs=2, **fit_input)
    assert int(model.optimizer.ledger.sample_count) == 0
    sampling = "fixed_order"
  model = _model(K, population_size=N, sampling=sampling)
  lots = _Lots(K, model)
  _fit(model, lots, epochs=2, **fit_input)
  assert len(lots.lots()) == 6
  _check(lots.lots(), _samples(model), N, sampling)
  _check_passes(lots.lots(), N, 3)


@pytest.mark.parametrize("K", KERAS)
def test_save_and_reload_between_fits(K, tmp_path):
  """The reloaded model's ledger holds the first fit's lots, and the next
  fit's lots follow them with the n of the data it trains on."""
  x, y = _data()
  model = _model(K)
  lots = _Lots(K, model)
  _fit(model, lots, x=x, y=y, batch_size=BATCH, epochs=1)
  first = lots.lots()
  keras3 = K is backend.keras3_module()
  path = str(tmp_path / ("model.keras" if keras3 else "model.h5"))
  model.save(path)
  loaded = K.models.load_model(path)
  assert _samples(loaded) == _samples(model)
  loaded = tf_dp.keras.make_private(loaded)
  lots = _Lots(K, loaded)
  _fit(loaded, lots, x=x[:11], y=y[:11], batch_size=BATCH, epochs=1)
  samples = _samples(loaded)
  _check(first, samples[:len(first)], N)
  _check(lots.lots(), samples[len(first):], 11)
