"""TF Privacy's Keras optimizer tests, ported to ``tf_dp.compat``.

Inputs and expected values are TF Privacy's, from
``tensorflow_privacy/privacy/optimizers/dp_optimizer_keras_test.py``. TF
Privacy called ``optimizer._compute_gradients(loss, var_list)`` on bare
variables; tf_dp computes per-example gradients in the training step of a
model converted with ``make_private``, so each case is a Keras model whose
weights are TF Privacy's variables and whose per-example loss is TF
Privacy's loss, trained for one lot with ``fit``. With noise 0 the update
must equal the optimizer's update for the expected clipped average. The
file's Keras-model cases run as released in ``test_tf_privacy_suite.py``.
"""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import tf_dp
from tf_dp.compat import tensorflow_privacy as tfp
from tf_dp.compat.tensorflow_privacy.privacy.optimizers import dp_optimizer_keras

K = tf.keras  # The Keras of TF Privacy users' scripts, as the compat uses.


class Vectors(K.layers.Layer):
  """Weights given by value; outputs them, concatenated, for every example
  (``linear=False``) or ``x . w0 + w1`` (``linear=True``)."""

  def __init__(self, values, linear=False, **kwargs):
    super().__init__(**kwargs)
    self.values, self.linear = values, linear

  def build(self, input_shape):
    self.vs = []
    for i, v in enumerate(self.values):
      w = self.add_weight(name=f"v{i}", shape=(len(v),), initializer="zeros")
      w.assign(np.asarray(v, np.float32))
      self.vs.append(w)

  def call(self, x):
    if self.linear:
      return tf.reduce_sum(x * self.vs[0], axis=-1, keepdims=True) + self.vs[1]
    row = tf.concat([tf.convert_to_tensor(v) for v in self.vs], axis=0)
    return tf.zeros_like(x[:, :1]) + row[tf.newaxis, :]


def half_squared_distance(y_true, y_pred):
  """TF Privacy's ``_loss``: its gradient is ``var - data``."""
  return 0.5 * tf.reduce_sum(tf.square(y_true - y_pred), axis=-1)


def identity_loss(y_true, y_pred):
  del y_true
  return tf.reduce_mean(y_pred, axis=-1)


def fit_one_lot(values, y, optimizer, loss=half_squared_distance, x=None,
                linear=False, batch_size=None):
  """A converted model with weights ``values``, fitted once on (x, y)."""
  x = np.zeros((len(y), 1), np.float32) if x is None else x
  model = K.Sequential([K.layers.Input((x.shape[1],)),
                        Vectors(values, linear=linear)])
  model = tf_dp.keras.make_private(model)
  model.compile(optimizer=optimizer, loss=loss)
  model.fit(x, np.asarray(y, np.float32), batch_size=batch_size or len(y),
            epochs=1, shuffle=False, verbose=0)
  return [v.numpy() for v in model.layers[-1].vs]


def reference_step(keras_optimizer, values, grads):
  """What ``keras_optimizer`` does to ``values`` with ``grads``, once."""
  variables = [tf.Variable(np.asarray(v, np.float32)) for v in values]
  keras_optimizer.apply_gradients(
      zip([tf.constant(g, tf.float32) for g in grads], variables))
  return [v.numpy() for v in variables]


DATA0 = [[3.0, 4.0], [5.0, 6.0], [7.0, 8.0], [-1.0, 0.0]]
DATA1 = [[8.0], [2.0], [3.0], [1.0]]


@pytest.mark.parametrize("name,keras_cls,num_microbatches", [
    ("DPKerasSGDOptimizer", "SGD", 1), ("DPKerasSGDOptimizer", "SGD", None),
    ("DPKerasAdamOptimizer", "Adam", 2),
    ("DPKerasAdagradOptimizer", "Adagrad", 4)])
def test_baseline_no_noise(name, keras_cls, num_microbatches):
  """testBaselineWithCallableLossNoNoise / testBaselineWithTensorLossNoNoise:
  var0 [1, 2], var1 [3], clip 100, noise 0, learning rate 2: the gradient is
  [-2.5, -2.5], [-0.5] and the update is the plain optimizer's for it."""
  with pytest.warns(UserWarning, match="noise_multiplier=0"):
    optimizer = getattr(tfp, name)(
        l2_norm_clip=100.0, noise_multiplier=0.0,
        num_microbatches=num_microbatches, learning_rate=2.0,
        population_size=4)
  values = [[1.0, 2.0], [3.0]]
  got = fit_one_lot(values, np.concatenate([DATA0, DATA1], axis=1), optimizer)
  expected = reference_step(getattr(K.optimizers, keras_cls)(2.0), values,
                            [[-2.5, -2.5], [-0.5]])
  if keras_cls == "SGD":
    np.testing.assert_allclose(expected[0], [6.0, 7.0])
  for a, b in zip(got, expected):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)  # float32


def test_clipping_norm():
  """testClippingNorm: data [[3, 4], [6, 8]], var [0, 0], one microbatch,
  clip 1: the mean gradient -[4.5, 6] is clipped to [-0.6, -0.8]."""
  with pytest.warns(UserWarning, match="noise_multiplier=0"):
    optimizer = tfp.DPKerasSGDOptimizer(1.0, 0.0, 1, learning_rate=1.0,
                                        population_size=2)
  got = fit_one_lot([[0.0, 0.0]], [[3.0, 4.0], [6.0, 8.0]], optimizer)
  np.testing.assert_allclose(got[0], [0.6, 0.8], rtol=1e-6)


@pytest.mark.parametrize("num_microbatches", [1, 2, 4])
def test_clipping_norm_multiple_variables(num_microbatches):
  """testClippingNormMultipleVariables: clip 2.5 over both variables
  jointly; the expected gradient is computed as TF Privacy computed it."""
  data0 = np.array([[3.0, 6.0], [5.0, 6.0], [4.0, 8.0], [-1.0, 0.0]])
  data1 = np.array([[8.0], [2.0], [3.0], [1.0]])
  values = [[1.0, 2.0], [3.0]]
  with pytest.warns(UserWarning, match="noise_multiplier=0"):
    optimizer = tfp.DPKerasSGDOptimizer(2.5, 0.0, num_microbatches,
                                        learning_rate=1.0, population_size=4)
  got = fit_one_lot(values, np.concatenate([data0, data1], axis=1), optimizer)
  grads = np.concatenate([data0 - values[0], data1 - values[1]], axis=1)
  grads = grads.reshape(num_microbatches, -1, 3).mean(axis=1)
  norms = np.linalg.norm(grads, axis=1)
  grads = grads * (2.5 / np.maximum(2.5, norms))[:, None]
  mean = -grads.mean(axis=0)
  np.testing.assert_allclose(got[0], np.array(values[0]) - mean[:2],
                             rtol=1e-5)
  np.testing.assert_allclose(got[1], np.array(values[1]) - mean[2:],
                             rtol=1e-5)


def test_large_batch_emulation_no_noise():
  """testLargeBatchEmulationNoNoise: loss var0 . x + var1, accumulation over
  2 batches, learning rate 1: [[1, 2]], [3] -> [[-1, 1]], [2] after the
  batches x1, x2, then -> [[-4, -0.5]], [1] after x2, x2."""
  x1 = [[2.0, 0.0], [0.0, 1.0]]
  x2 = [[4.0, 2.0], [2.0, 1.0]]
  state = [[1.0, 2.0], [3.0]]
  for xs, expected in (((x1, x2), [[-1.0, 1.0], [2.0]]),
                       ((x2, x2), [[-4.0, -0.5], [1.0]])):
    with pytest.warns(UserWarning, match="noise_multiplier=0"):
      optimizer = tfp.DPKerasSGDOptimizer(
          l2_norm_clip=100.0, noise_multiplier=0.0,
          gradient_accumulation_steps=2, learning_rate=1.0, population_size=4,
          sampling="fixed_order")
    x = np.array(xs[0] + xs[1], np.float32)
    state = fit_one_lot(state, np.zeros((4, 1)), optimizer, identity_loss,
                        x=x, linear=True, batch_size=2)
    for a, b in zip(state, expected):
      np.testing.assert_allclose(a, b, rtol=1e-6)
    assert optimizer.ledger is not None


def test_population_size_comes_from_fit_arrays_as_in_tf_privacy_scripts():
  """TF Privacy's scripts pass no population_size: fit on arrays supplies
  it; a dataset of unknown size fails at the first step with the fix."""
  x = np.random.default_rng(0).normal(size=(24, 2)).astype(np.float32)
  y = x.sum(axis=1, keepdims=True)
  model = tf_dp.keras.make_private(
      K.Sequential([K.layers.Input((2,)), K.layers.Dense(1)]))
  model.compile(tfp.DPKerasAdamOptimizer(1.0, 1.1, learning_rate=0.1), "mse")
  model.fit(x, y, batch_size=8, epochs=1, verbose=0)
  samples = model.optimizer.ledger.to_dict()["samples"]
  assert [s["population_size"] for s in samples] == [24] * 3
  assert samples[0]["sampling_probability"] == pytest.approx(8 / 24)
  model.compile(tfp.DPKerasSGDOptimizer(1.0, 1.1, learning_rate=0.1), "mse")
  with pytest.raises(ValueError, match=r"population_size=len\(x_train\)"):
    model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(8),
              verbose=0)


def _one_step(convert, optimizer_fn):
  """A Dense(1) from 0.3 fitted once on four examples (batch 4)."""
  x = np.array([[1.0, 2.0], [3.0, -1.0], [0.5, 0.5], [-2.0, 1.0]],
               np.float32)
  y = np.array([[1.0], [-1.0], [2.0], [0.0]], np.float32)
  model = K.Sequential([K.layers.Input((2,)), K.layers.Dense(
      1, kernel_initializer=K.initializers.Constant(0.3))])
  if convert:
    model = tf_dp.keras.make_private(model)
  # Made before ``model.compile`` is looked up, as TF Privacy's tutorials
  # do: the first DP optimizer of the process installs the conversion.
  optimizer = optimizer_fn()
  model.compile(optimizer=optimizer,
                loss=K.losses.MeanSquaredError(reduction="none"))
  model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
  return model


def test_compile_converts_a_plain_model_as_tf_privacy_tutorials_need():
  """mnist_dpsgd_tutorial_keras.py compiles a plain model with
  DPKerasSGDOptimizer: compile converts it, and its step is the step of a
  model converted by hand (clip 0.01 binds, no noise); not the plain SGD
  step."""
  def dp_sgd():
    with pytest.warns(UserWarning, match="noise_multiplier=0"):
      return tfp.DPKerasSGDOptimizer(0.01, 0.0, 4, learning_rate=1.0)
  compiled = _one_step(False, dp_sgd)
  by_hand = _one_step(True, dp_sgd)
  plain = _one_step(False, lambda: K.optimizers.SGD(1.0))
  assert tf_dp.keras.is_private(compiled)
  for a, b, c in zip(compiled.get_weights(), by_hand.get_weights(),
                     plain.get_weights()):
    np.testing.assert_allclose(a, b, atol=1e-7)
    assert np.max(np.abs(a - c)) > 0.1  # The clip changed the step.
  assert len(compiled.optimizer.ledger.to_dict()["samples"]) == 1


def test_vectorized_optimizers_are_the_dp_optimizers():
  from tf_dp.compat.tensorflow_privacy.privacy.optimizers import dp_optimizer_keras_vectorized as vectorized  # pylint: disable=g-import-not-at-top
  assert tfp.VectorizedDPKerasSGDOptimizer is tfp.DPKerasSGDOptimizer
  assert vectorized.VectorizedDPKerasAdamOptimizer is (
      tfp.DPKerasAdamOptimizer)
  optimizer = tfp.VectorizedDPKerasAdagradOptimizer(
      1.0, 1.1, learning_rate=0.1, population_size=100)
  assert isinstance(optimizer.inner_optimizer, K.optimizers.Adagrad)


def test_accumulation_warns_about_noise_per_lot():
  with pytest.warns(UserWarning, match=r"noise_multiplier=2\.2"):
    tfp.DPKerasSGDOptimizer(1.0, 1.1, gradient_accumulation_steps=4,
                            learning_rate=0.1, population_size=100)


def test_make_keras_optimizer_class():
  dp_rmsprop = tfp.make_keras_optimizer_class(K.optimizers.RMSprop)
  assert dp_rmsprop.__name__ == "DPKerasRMSpropOptimizer"
  optimizer = dp_rmsprop(1.0, 1.1, None, 1, learning_rate=0.01,
                         population_size=60000)
  assert isinstance(optimizer.inner_optimizer, K.optimizers.RMSprop)
  assert int(optimizer.ledger.population_size.numpy()) == 60000
  assert dp_optimizer_keras.DPKerasSGDOptimizer is tfp.DPKerasSGDOptimizer


def test_models_loaded_after_compile_conversion_keep_their_optimizer(
    tmp_path):
  """Making a compat optimizer wraps ``compile``; Keras still compiles a
  model it loads afterwards (Keras 3 skips that for a class whose
  ``compile`` is not ``Trainer.compile``)."""
  with pytest.warns(UserWarning, match="noise_multiplier=0"):
    tfp.DPKerasSGDOptimizer(1.0, 0.0, learning_rate=0.1,
                            population_size=10)
  model = K.Sequential([K.Input((3,)), K.layers.Dense(1)])
  model.compile(optimizer=K.optimizers.SGD(0.1),
                loss=K.losses.MeanSquaredError())
  model.fit(np.ones((4, 3), "float32"), np.ones((4, 1), "float32"),
            verbose=0)
  keras3 = tf_dp.keras.backend.flavor_of(model) == "keras3"
  path = str(tmp_path / ("model.keras" if keras3 else "model.h5"))
  model.save(path)
  loaded = K.models.load_model(path)
  assert isinstance(loaded.optimizer, K.optimizers.SGD)


def _dense_regression(n=24, seed=0):
  x = np.random.default_rng(seed).normal(size=(n, 2)).astype(np.float32)
  model = K.Sequential([K.layers.Input((2,)), K.layers.Dense(1)])
  return model, x, x.sum(axis=1, keepdims=True)


def _refusal(error, call):
  with pytest.raises(error) as refusal:
    call()
  return str(refusal.value)


def test_refusals_name_tf_privacy_constructors_not_dp_optimizer():
  """A TF Privacy user is told which argument of the constructor they
  called to set (population_size, sampling) and how compile converts the
  model, not tf_dp.DPOptimizer's call."""
  said = _refusal(ValueError, lambda: tfp.DPKerasSGDOptimizer(
      1.0, 1.1, learning_rate=0.1, population_size=0))
  assert "DPKerasSGDOptimizer(..., population_size=len(x_train))" in said
  assert "a keyword tf_dp adds to TF Privacy's arguments" in said

  model, x, y = _dense_regression()
  optimizer = tfp.DPKerasAdamOptimizer(1.0, 1.1, learning_rate=0.1)
  model.compile(optimizer, "mse")
  said = _refusal(tf_dp.errors.PrivacyError, lambda: model.fit(
      tf.data.Dataset.from_tensor_slices((x, y)).batch(8), verbose=0))
  assert "DPKerasAdamOptimizer(..., population_size=len(x_train))" in said

  model, x, y = _dense_regression()
  optimizer = tfp.DPKerasSGDOptimizer(1.0, 1.1, learning_rate=0.1)
  model.compile(optimizer, "mse")
  said = _refusal(tf_dp.errors.SamplingMismatchError, lambda: model.fit(
      x, y, batch_size=8, shuffle=False, verbose=0))
  assert 'DPKerasSGDOptimizer(..., sampling="fixed_order")' in said
  # noise_strategy is tf_dp's own: said with the call that takes it.
  assert ("tf_dp.DPOptimizer(..., noise_strategy=...) (DPKerasSGDOptimizer "
          "does not take noise_strategy)") in said

  dp_rmsprop = tfp.make_keras_optimizer_class(K.optimizers.RMSprop)
  optimizer = dp_rmsprop(1.0, 1.1, learning_rate=0.1, population_size=10)
  variable = tf.Variable([1.0])
  said = _refusal(RuntimeError, lambda: optimizer.apply_gradients(
      [(tf.constant([1.0]), variable)]))
  assert "optimizer = DPKerasRMSpropOptimizer(...)" in said
  assert "make_private" in said and "DPOptimizer(..." not in said


# TF Privacy's classification notebook: disable_v2_behavior(), then its
# optimizer. Then the fix the refusals name for graph-mode code: a compat.v1
# optimizer trains in a Session (clip 100 does not bind, no noise: one SGD
# step of the mean gradient of (x . w - y)^2 from w = 0).
_GRAPH_MODE = """
import json
import warnings
import numpy as np
import tensorflow as tf
tf.compat.v1.disable_v2_behavior()
import tf_dp
from tf_dp.compat import tensorflow_privacy
from tf_dp.compat.tensorflow_privacy.privacy.optimizers import dp_optimizer

refusals = {}
def refused(name, make):
  try:
    make()
    refusals[name] = None
  except Exception as e:  # pylint: disable=broad-except
    refusals[name] = [type(e).__name__, str(e)]

K = tf.keras
refused("DPKerasSGDOptimizer", lambda: tensorflow_privacy.DPKerasSGDOptimizer(
    l2_norm_clip=1.5, noise_multiplier=1.3, num_microbatches=4,
    learning_rate=0.25))
refused("DPSequential", lambda: tensorflow_privacy.DPSequential(
    1.5, 1.3, layers=[K.layers.Dense(1)]))
refused("DPOptimizer", lambda: tf_dp.DPOptimizer(K.optimizers.SGD(0.1), 1.0, 1.1))
refused("tf_dp.keras.make_private", lambda: tf_dp.keras.make_private(
    K.Sequential([K.layers.Dense(1)])))
x = np.array([[1.0, 2.0], [3.0, -1.0], [0.5, 0.5], [-2.0, 1.0]], "float32")
y = np.array([1.0, -1.0, 2.0, 0.0], "float32")
w = tf.Variable([0.0, 0.0])
loss = tf.square(tf.linalg.matvec(tf.constant(x), w) - y)
with warnings.catch_warnings():
  warnings.simplefilter("ignore", UserWarning)  # noise_multiplier=0.
  train = dp_optimizer.DPGradientDescentGaussianOptimizer(
      100.0, 0.0, learning_rate=0.5, population_size=4).minimize(
          loss, var_list=[w])
with tf.compat.v1.Session() as session:
  session.run(tf.compat.v1.global_variables_initializer())
  session.run(train)
  print(json.dumps({"refusals": refusals, "w": session.run(w).tolist()}))
"""


def test_graph_mode_is_refused_at_construction_naming_the_fix():
  """Keras cannot run tf_dp's step with TF2 behaviour off (Keras 3 fit
  fails even without DP; Keras 2's graph-mode loop never calls the
  train_step make_private installs): the Keras optimizers and models
  refuse to be made, naming the fix, where TF Privacy's notebook crashed
  inside fit. The compat.v1 optimizers they point to train there. Its own
  process: disable_v2_behavior() cannot be undone."""
  root = pathlib.Path(__file__).resolve().parents[2]
  done = subprocess.run(
      [sys.executable, "-c", _GRAPH_MODE], capture_output=True, text=True,
      check=False, cwd=root, timeout=300,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  assert done.returncode == 0, done.stderr[-3000:]
  result = json.loads(done.stdout.strip().splitlines()[-1])
  for constructor, refusal in result["refusals"].items():
    assert refusal is not None, f"{constructor} was made in graph mode"
    kind, said = refusal
    assert kind == "RuntimeError", said
    assert said.startswith(f"{constructor} needs TensorFlow 2 behaviour")
    for fix in ("remove tf.compat.v1.disable_v2_behavior()",
                "DPGradientDescentGaussianOptimizer"):
      assert fix in said, said
  x = np.array([[1.0, 2.0], [3.0, -1.0], [0.5, 0.5], [-2.0, 1.0]])
  y = np.array([1.0, -1.0, 2.0, 0.0])
  # From w = 0 each example's gradient is -2 y x; one step of rate 0.5.
  np.testing.assert_allclose(result["w"], 0.5 * np.mean(2 * y[:, None] * x,
                                                         axis=0), rtol=1e-6)
