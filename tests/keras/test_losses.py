"""Per-example losses of models with several outputs: every output's loss.

Each layout of outputs, losses and loss weights that Keras accepts (a dict,
a list, one loss for every output, a loss left out, losses named by output
for a list of outputs, labels given by output name, nested outputs), on both
Keras flavours:

* the batch mean of tf_dp's per-example losses equals the loss Keras
  computes for the batch (float32 rounding: rtol 1e-6), for predictions
  that differ from the labels on every output, so that a dropped output's
  loss changes the mean by its share (at least 0.2 of it here);
* end to end (the dict layout of TF Privacy's DPModel tests, and nested
  outputs): with clip 1e9 and no noise, one DP-SGD step of ``fit`` moves
  every variable exactly as one plain SGD step does (float32: atol 1e-5 on
  updates of size up to ~10).
"""

import warnings

import numpy as np
import pytest
import tensorflow as tf

import tf_dp
from tests.keras import helpers
from tf_dp.keras import backend
from tf_dp.keras import losses as losses_lib

BATCH = 4
_RNG = np.random.default_rng(0)
X = {n: _RNG.normal(size=(BATCH, 3)).astype("float32") for n in "abc"}
Y = {n: _RNG.normal(size=(BATCH, 1)).astype("float32") for n in "abc"}
SAMPLE_WEIGHT = np.array([0.5, 1.0, 2.0, 1.5], "float32")


def _model(K, outputs):
  """Three Dense(1) branches (inputs a, b, c); ``outputs`` picks the
  layout: "dict" {out_a, out_b}, "list" [out_a, out_b], "nested"
  {p: [out_a, out_b], q: out_c}."""
  inputs = {n: K.Input((3,), name=n) for n in "abc"}
  out = {n: K.layers.Dense(1, name="out_" + n,
                           kernel_initializer=K.initializers.Constant(0.5))(
                               inputs[n]) for n in "abc"}
  if outputs == "dict":
    out = {"out_a": out["a"], "out_b": out["b"]}
  elif outputs == "list":
    out = [out["a"], out["b"]]
  else:
    out = {"p": [out["a"], out["b"]], "q": out["c"]}
  return K.Model(inputs, out)


def _layouts(K):
  """name -> (outputs, compile kwargs, labels)."""
  mse, mae = K.losses.MeanSquaredError, K.losses.MeanAbsoluteError
  named = lambda: {"out_a": mse(), "out_b": mae()}  # pylint: disable=unnecessary-lambda-assignment
  weights = {"out_a": 0.4, "out_b": 0.6}
  by_name = {"out_a": Y["a"], "out_b": Y["b"]}
  return {
      "dict": ("dict", dict(loss=named(), loss_weights=weights), by_name),
      "dict_one_left_out": ("dict", dict(loss={"out_a": mse(),
                                               "out_b": None}), by_name),
      "list": ("list", dict(loss=[mse(), mae()], loss_weights=[0.4, 0.6]),
               [Y["a"], Y["b"]]),
      "list_one_loss": ("list", dict(loss=mae()), [Y["a"], Y["b"]]),
      "list_losses_by_name": ("list", dict(loss=named(), loss_weights=weights),
                              [Y["a"], Y["b"]]),
      "list_labels_by_name": ("list", dict(loss=named(),
                                           loss_weights=weights), by_name),
      "nested": ("nested", dict(loss={"p": [mse(), mae()], "q": mse()},
                                loss_weights={"p": [0.2, 0.3], "q": 0.5}),
                 {"p": [Y["a"], Y["b"]], "q": Y["c"]}),
  }


def _cases():
  return [pytest.param(p.values[0], name, id=f"{p.id}-{name}")
          for p in helpers.keras_modules()
          for name in _layouts(p.values[0])]


def _keras_batch_loss(model, y, y_pred, sample_weight):
  if backend.flavor_of(model) == "keras3":
    return model.compute_loss(x=None, y=y, y_pred=y_pred,
                              sample_weight=sample_weight)
  return model.compiled_loss(y, y_pred, sample_weight)


@pytest.mark.parametrize("K,layout", _cases())
def test_per_example_losses_count_every_output(K, layout):
  outputs, compile_kwargs, y = _layouts(K)[layout]
  model = _model(K, outputs)
  model.compile(optimizer=K.optimizers.SGD(1.0), **compile_kwargs)
  y_pred = model(X)
  y = tf.nest.map_structure(tf.constant, y)
  for weight in (None, tf.constant(SAMPLE_WEIGHT)):
    values = losses_lib.per_example_loss_fn(model)(y, y_pred, weight)
    assert values.shape == (BATCH,)
    np.testing.assert_allclose(
        float(tf.reduce_mean(values)),
        float(_keras_batch_loss(model, y, y_pred, weight)), rtol=1e-6)


def _plain_step(model, y):
  """The variables after one SGD(1.0) step on the whole batch, by a tape."""
  with tf.GradientTape() as tape:
    loss = _keras_batch_loss(model, tf.nest.map_structure(tf.constant, y),
                             model(X, training=True), None)
  grads = tape.gradient(loss, model.trainable_variables)
  return {_key(v): v.numpy() - g.numpy()
          for v, g in zip(model.trainable_variables, grads)}


def _key(variable):
  """"out_a/kernel" on both flavours (Keras 3's name is "kernel")."""
  return (getattr(variable, "path", None) or variable.name).split(":")[0]


@pytest.mark.parametrize("K", helpers.keras_modules())
@pytest.mark.parametrize("layout", ["dict", "nested"])
def test_dp_step_equals_plain_step_for_every_output(K, layout):
  outputs, compile_kwargs, y = _layouts(K)[layout]
  plain = _model(K, outputs)
  plain.compile(optimizer=K.optimizers.SGD(1.0), **compile_kwargs)
  expected = _plain_step(plain, y)
  # The self-check (tested elsewhere) is left out: it takes seconds.
  model = tf_dp.keras.make_private(_model(K, outputs))
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)  # noise_multiplier=0.
    model.compile(optimizer=tf_dp.DPOptimizer(
        K.optimizers.SGD(1.0), l2_norm_clip=1e9, noise_multiplier=0.0,
        population_size=BATCH), **_layouts(K)[layout][1])
    model.fit(X, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
  moved = 0
  for v in model.trainable_variables:
    np.testing.assert_allclose(v.numpy(), expected[_key(v)], atol=1e-5,
                               err_msg=_key(v))
    moved += int(np.any(np.abs(expected[_key(v)] - (
        0.5 if "kernel" in _key(v) else 0.0)) > 1e-3))
  assert moved == len(model.trainable_variables)  # Every output trains.
