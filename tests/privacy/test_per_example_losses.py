"""Per-example losses: Keras's own value, and no example reads another's data.

For every loss in the Keras registry of each flavour, by name and as a
``Loss`` object, with and without a trailing 1 on the labels and with
sample weights: (1) the batch mean of tf_dp's per-example losses equals the
loss Keras computes for the batch (float32 rounding: rtol 1e-5); (2)
changing one example's label and prediction leaves every other example's
loss bit-for-bit unchanged.
"""

import numpy as np
import pytest
import tensorflow as tf

from tests.keras import helpers
from tests.privacy import catalogue
from tf_dp.keras import backend
from tf_dp.keras import losses as losses_lib

BATCH = 6


def _cases():
  cases = []
  for param in helpers.keras_modules():
    K = param.values[0]
    flavor = param.id
    names, classes = catalogue.registry_names(K)
    for spec in names + [f"class:{c}" for c in classes]:
      kind = catalogue.KINDS.get(spec) or catalogue.CLASSES[spec[6:]]
      for units, shape in catalogue.configs(kind, BATCH):
        cases.append(pytest.param(
            K, spec, kind, units, shape,
            id=f"{flavor}-{spec}-{units}u-labels{len(shape)}d"))
  return cases


def _compiled(K, spec, kind, units):
  model = K.Sequential([K.Input((2,)), K.layers.Dense(
      units, activation=catalogue.output_activation(kind))])
  loss = getattr(K.losses, spec[6:])() if spec.startswith("class:") else spec
  model.compile(optimizer=K.optimizers.SGD(0.1), loss=loss)
  return model


def _keras_batch_loss(model, y, y_pred, sample_weight):
  if backend.flavor_of(model) == "keras3":
    return float(model.compute_loss(y=y, y_pred=y_pred,
                                    sample_weight=sample_weight))
  return float(model.compiled_loss(tf.constant(y), y_pred,
                                   tf.constant(sample_weight)))


@pytest.mark.parametrize("K,spec,kind,units,shape", _cases())
def test_per_example_losses_match_keras_and_do_not_mix(K, spec, kind, units,
                                                       shape):
  rng = np.random.default_rng(0)
  model = _compiled(K, spec, kind, units)
  per_example = losses_lib.per_example_loss_fn(model)
  y = catalogue.labels(kind, shape, rng)
  y_pred = tf.constant(catalogue.predictions(kind, units, BATCH, rng))
  weight = rng.uniform(0.5, 2.0, size=(BATCH,)).astype("float32")
  values = per_example(tf.constant(y), y_pred, tf.constant(weight)).numpy()
  assert values.shape == (BATCH,) and np.all(np.isfinite(values))
  name = spec[6:] if spec.startswith("class:") else spec
  if name not in catalogue.BATCH_LEVEL:
    np.testing.assert_allclose(values.mean(),
                               _keras_batch_loss(model, y, y_pred, weight),
                               rtol=1e-5, atol=1e-7)
  # Change example 2 only: every other example's loss is unchanged.
  y2 = np.array(y)
  other = catalogue.labels(kind, shape, np.random.default_rng(1))
  y2[2] = other[2] if not np.array_equal(other[2], y[2]) else (
      other[3] if not np.array_equal(other[3], y[2]) else 1 - y[2])
  pred2 = y_pred.numpy()
  pred2[2] = catalogue.predictions(kind, units, BATCH,
                                   np.random.default_rng(2))[2]
  changed = per_example(tf.constant(y2), tf.constant(pred2),
                        tf.constant(weight)).numpy()
  keep = np.arange(BATCH) != 2
  np.testing.assert_array_equal(changed[keep], values[keep])
  if not ("osine" in spec and units == 1):  # Cosine of scalars is always -1.
    assert changed[2] != values[2]


@pytest.mark.parametrize("K", [p.values[0] for p in helpers.keras_modules()],
                         ids=[p.id for p in helpers.keras_modules()])
def test_the_eager_loop_and_vectorized_map_give_the_same_losses(K):
  # A few examples in eager mode run in a Python loop, more examples (or a
  # traced call) under tf.vectorized_map: the same values, masks and sample
  # weights included (a masked sequence output, each example normalised by
  # its own unmasked positions).
  rng = np.random.default_rng(0)
  model = K.Sequential([K.Input((4,), dtype="int32"),
                        K.layers.Embedding(5, 3, mask_zero=True),
                        K.layers.Dense(3)])
  model.compile(optimizer=K.optimizers.SGD(0.1),
                loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  per_example = losses_lib.per_example_loss_fn(model)
  n = losses_lib._EAGER_LOOP_MAX_EXAMPLES + 4  # pylint: disable=protected-access
  x = rng.integers(0, 5, (n, 4)).astype("int32")
  x[:, 0] = 1  # At least one unmasked position per example.
  y = tf.constant(rng.integers(0, 3, (n, 4)).astype("int32"))
  w = tf.constant(rng.uniform(0.5, 2.0, n).astype("float32"))
  y_pred = model(x)
  assert backend.for_object(model).output_mask(y_pred) is not None
  mapped = per_example(y, y_pred, w).numpy()  # n > the loop's limit.
  few = 6
  looped = per_example(y[:few], model(x[:few]), w[:few]).numpy()
  traced = tf.function(lambda: per_example(y[:few], model(x[:few]),
                                           w[:few]))().numpy()
  np.testing.assert_allclose(looped, mapped[:few], rtol=1e-6)
  np.testing.assert_allclose(traced, mapped[:few], rtol=1e-6)
  # The reference: example i's masked mean, by hand.
  logits = model(x).numpy().astype(np.float64)
  logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  nll = -np.take_along_axis(logp, y.numpy()[..., None], -1)[..., 0]
  mask = x != 0
  expected = w.numpy() * (nll * mask).sum(1) / mask.sum(1)
  np.testing.assert_allclose(mapped, expected, rtol=1e-5)
