"""Token ids as tf.RaggedTensor or tf.SparseTensor train privately.

Each example is computed alone, as a batch of one of its own type, by a
``tf.map_fn`` loop; checked against a per-example loop and by a neighbour
test (noise 0: replacing one example moves the clipped sum by at most 2C).
"""

import warnings

import numpy as np
import pytest
import tensorflow as tf

import tf_dp
from tests.keras import helpers

KERAS = helpers.keras_modules()
CLIP = 0.01
TOKENS = [[1, 2, 3], [4, 5], [6], [7, 8, 9, 1]]
LABELS = np.array([0, 1, 2, 1], "int32")


def _ids(rows, kind):
  ragged = tf.ragged.constant(rows, dtype=tf.int64)
  return ragged if kind == "ragged" else ragged.to_sparse()


def _model(K, kind, seed=0):
  init = K.initializers.GlorotUniform(seed=seed)
  inputs = K.Input(shape=(None,), dtype="int64", ragged=kind == "ragged",
                   sparse=kind == "sparse")
  h = K.layers.Embedding(10, 4, embeddings_initializer=init)(inputs)
  h = K.layers.GlobalAveragePooling1D()(h)
  return K.Model(inputs, K.layers.Dense(3, kernel_initializer=init)(h))


def _loss(K):
  return K.losses.SparseCategoricalCrossentropy(from_logits=True)


def _flat(values):
  return np.concatenate([np.asarray(tf.convert_to_tensor(v), np.float64)
                         .ravel() for v in values])


def _dp_update(K, kind, rows, labels, clip, noise=0.0, **fit_kwargs):
  """Weights before minus after one DP step of SGD(1) on the whole batch."""
  model = tf_dp.keras.make_private(_model(K, kind))
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)  # noise_multiplier=0.
    model.compile(tf_dp.DPOptimizer(K.optimizers.SGD(1.0), clip, noise),
                  _loss(K))
  before = _flat(model.trainable_variables)
  model.fit(_ids(rows, kind), labels, batch_size=len(rows), shuffle=False,
            verbose=0, **fit_kwargs)
  return before - _flat(model.trainable_variables), model


def _loop_reference(K, kind, rows, labels, clip):
  """Mean over examples of each one's clipped gradient, each computed on a
  batch holding that example alone."""
  model = _model(K, kind)
  total = 0.0
  for row, label in zip(rows, labels):
    with tf.GradientTape() as tape:
      loss = _loss(K)(label[None], model(_ids([row], kind)))
    g = _flat(tape.gradient(loss, model.trainable_variables))
    total = total + g * min(1.0, clip / np.linalg.norm(g))
  return total / len(rows)


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("kind", ["ragged", "sparse"])
def test_step_equals_the_per_example_loop(K, kind):
  got, model = _dp_update(K, kind, TOKENS, LABELS, CLIP)
  expected = _loop_reference(K, kind, TOKENS, LABELS, CLIP)
  np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7)
  # Every example was clipped: the test would fail without clipping.
  unclipped = _loop_reference(K, kind, TOKENS, LABELS, 1e9)
  assert np.linalg.norm(unclipped - expected) > 10 * CLIP
  samples = model.optimizer.ledger.to_dict()["samples"]
  assert len(samples) == 1  # population_size inferred: 4 examples.
  assert samples[0]["population_size"] == 4


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("kind", ["ragged", "sparse"])
def test_one_example_moves_the_clipped_sum_by_at_most_2c(K, kind):
  neighbour = list(TOKENS)
  neighbour[1] = [9, 9, 9, 9, 9, 2]  # Other tokens, another length.
  labels_n = LABELS.copy()
  labels_n[1] = 0
  a, _ = _dp_update(K, kind, TOKENS, LABELS, CLIP)
  b, _ = _dp_update(K, kind, neighbour, labels_n, CLIP)
  change = len(TOKENS) * np.linalg.norm(a - b)
  assert change <= 2 * CLIP * (1 + 1e-5), change
  # Without clipping the change is above the bound (the loop's sums).
  unclipped = len(TOKENS) * np.linalg.norm(
      _loop_reference(K, kind, TOKENS, LABELS, 1e9) -
      _loop_reference(K, kind, neighbour, labels_n, 1e9))
  assert unclipped > 2 * CLIP * (1 + 1e-5), unclipped


@pytest.mark.parametrize("K", KERAS)
def test_fit_trains_with_noise_and_microbatches_and_records_every_lot(K):
  rng = np.random.default_rng(0)
  rows = [list(rng.integers(1, 10, rng.integers(1, 7))) for _ in range(32)]
  labels = rng.integers(0, 3, 32).astype("int32")
  model = tf_dp.keras.make_private(_model(K, "ragged"))
  model.compile(tf_dp.DPOptimizer(K.optimizers.SGD(0.5), 1.0, 0.5,
                                  num_microbatches=4), _loss(K))
  history = model.fit(_ids(rows, "ragged"), labels, batch_size=8, epochs=2,
                      verbose=0)
  assert np.all(np.isfinite(history.history["loss"]))
  samples = model.optimizer.ledger.to_dict()["samples"]
  assert len(samples) == 8
  assert {s["population_size"] for s in samples} == {32}
  assert {s["examples_per_record"] for s in samples} == {2}


@pytest.mark.parametrize("K", KERAS)
def test_an_unbuilt_sequential_is_built_and_trains(K):
  """Built on a few examples of the first batch before the first DP step."""
  x, y = helpers.make_data("dense", 16)
  model = K.Sequential([K.layers.Dense(4), K.layers.Dense(3)])
  model = tf_dp.keras.make_private(model)
  model.compile(tf_dp.DPOptimizer(K.optimizers.SGD(0.1), 1.0, 1.0), _loss(K))
  model.fit(x, y, batch_size=8, verbose=0)
  assert len(model.optimizer.ledger.to_dict()["samples"]) == 2
