"""``make_private``'s ``fit``: Keras traces its DP step once; on Poisson lots
the padding rows a lot carries are never counted in the reported loss and
metrics, and class weights fold into the lots' weights."""

import warnings

import numpy as np
import pytest
import tensorflow as tf

import tf_dp
from tests.keras import helpers
from tf_dp.keras import private_model

KERAS = helpers.keras_modules()


@pytest.mark.parametrize("K", KERAS)
def test_fit_traces_the_dp_step_once(K, monkeypatch):
  """The DP state (the queries' state, the lot, the noise key) exists
  before Keras traces the train step: a tf.function whose trace creates
  variables is traced a second time (twice the DP step's tracing, the
  largest part of a first fit's time)."""
  traces = []
  step = private_model._dp_train_step  # pylint: disable=protected-access

  def counted(*args, **kwargs):
    traces.append(1)
    return step(*args, **kwargs)

  monkeypatch.setattr(private_model, "_dp_train_step", counted)
  x, y = helpers.make_data("dense", 32)
  model = tf_dp.keras.make_private(helpers.build_model(K, "dense"))
  model.compile(optimizer=tf_dp.DPOptimizer(
      K.optimizers.SGD(0.1), l2_norm_clip=1.0, noise_multiplier=1.0,
      population_size=32),
                loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  model.fit(x, y, batch_size=8, epochs=2, verbose=0)
  assert len(traces) == 1
  assert model.optimizer.ledger.to_dict()["samples"][-1]["sampling"] == (
      "shuffled")
  assert len(model.optimizer.ledger.to_dict()["samples"]) == 8


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
    return helpers.weights(model)

  weighted = trained(_fixed_lots(stacked, q, n),
                     class_weight=class_weight)
  reference = trained(_fixed_lots(stacked, q, n,
                                  np.array([3.0, 0.25, 1.0], "float32")))
  unweighted = trained(_fixed_lots(stacked, q, n))
  for got, want in zip(weighted, reference):
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
  assert max(np.abs(a - b).max() for a, b in zip(weighted, unweighted)) > 1e-3


@pytest.mark.parametrize("K", KERAS)
def test_jit_compile_warns_that_xla_recompiles_every_step(K):
  """XLA compiles the DP step again for every batch (21 s per step against
  14 ms without XLA, measured): fit says so, and still trains privately."""
  x, y = helpers.make_data("dense", 8)
  model = tf_dp.keras.make_private(helpers.build_model(K, "dense"))
  model.compile(optimizer=tf_dp.DPOptimizer(
      K.optimizers.SGD(0.1), 1.0, 1.0, population_size=8),
                loss=K.losses.SparseCategoricalCrossentropy(from_logits=True),
                jit_compile=True)
  with pytest.warns(UserWarning, match="jit_compile=False"):
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
  assert len(model.optimizer.ledger.to_dict()["samples"]) == 1
