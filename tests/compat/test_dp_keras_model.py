"""``DPSequential`` / ``DPModel`` of ``tf_dp.compat.tensorflow_privacy``.

The TF Privacy usage, ``DPSequential(l2_norm_clip, noise_multiplier,
layers=[...])`` then ``compile(optimizer=<plain Keras optimizer>)``, as in
``tensorflow_privacy/privacy/keras_models/dp_keras_model_test.py``
(testClippingNorm: its inputs and expected weights, with the
``population_size`` its ``tf.data`` pipeline does not give; the file itself
runs in ``test_tf_privacy_suite.py``); plus one lot of 8 examples against
the clipped average computed in numpy.
"""

import numpy as np
import pytest
import tensorflow as tf

import tf_dp
from tf_dp.compat import tensorflow_privacy as tfp

K = tf.keras


def _data(n=8, seed=0):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(n, 3)).astype(np.float32)
  y = rng.normal(size=(n, 1)).astype(np.float32) * 3
  return x, y


def _dense():
  return K.layers.Dense(1, kernel_initializer="zeros", bias_initializer="zeros")


def expected_one_lot(x, y, clip):
  """SGD(1) on a zero linear model with MSE: each example's gradient is
  -2 y [x, 1]; clipped to ``clip``, averaged, subtracted."""
  grads = -2 * y * np.concatenate([x, np.ones((len(x), 1))], axis=1)
  norms = np.linalg.norm(grads, axis=1, keepdims=True)
  return -(grads * np.minimum(1.0, clip / norms)).mean(axis=0)


@pytest.mark.parametrize("kind", ["DPSequential", "DPModel"])
def test_compile_wraps_plain_optimizer_and_clips(kind):
  x, y = _data()
  if kind == "DPSequential":
    model = tfp.DPSequential(l2_norm_clip=0.5, noise_multiplier=0.0,
                             layers=[K.layers.Input((3,)), _dense()],
                             population_size=8)
  else:
    inputs = K.layers.Input((3,))
    model = tfp.DPModel(l2_norm_clip=0.5, noise_multiplier=0.0,
                        inputs=inputs, outputs=_dense()(inputs))
  assert tf_dp.keras.is_private(model)
  with pytest.warns(UserWarning, match="noise_multiplier=0"):
    if kind == "DPSequential":
      model.compile(optimizer=K.optimizers.SGD(1.0), loss="mse")
    else:
      model.compile(optimizer=K.optimizers.SGD(1.0), loss="mse",
                    population_size=8)
  assert hasattr(model.optimizer, "ledger")
  model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
  got = np.concatenate([w.ravel() for w in model.get_weights()])
  np.testing.assert_allclose(got, expected_one_lot(x, y, 0.5), rtol=1e-5,
                             atol=1e-6)


TRAIN_DATA = np.array([[3.0, 4.0]], np.float32)
TRAIN_LABELS = TRAIN_DATA @ np.array([[3.0], [1.0]], np.float32) + 2  # 15


def _tf_privacy_model(kind, l2_norm_clip):
  layer = K.layers.Dense(1, kernel_initializer="zeros",
                         bias_initializer="zeros")
  if kind == "DPSequential":
    return tfp.DPSequential(l2_norm_clip=l2_norm_clip, noise_multiplier=0.0,
                            layers=[K.layers.Input((2,)), layer],
                            population_size=1)
  inputs = K.Input(shape=(2,), dtype=tf.float32)
  return tfp.DPModel(l2_norm_clip=l2_norm_clip, noise_multiplier=0.0,
                     inputs=inputs, outputs=layer(inputs), population_size=1)


# TF Privacy's clips against the gradient's norm (153, 27.5 with the
# weight): clipped with and without the weight, and not clipped; both kinds
# build the same converted step, so each case takes one of them.
@pytest.mark.parametrize("kind,l2_norm_clip,weighted", [
    ("DPSequential", 10.0, False), ("DPModel", 10.0, True),
    ("DPModel", 40.0, False), ("DPSequential", 200.0, True)])
def test_clipping_norm(kind, l2_norm_clip, weighted):
  """dp_keras_model_test.py, testClippingNorm (without TF Privacy's
  layer_registry; tf_dp picks its fast path itself), with the
  population_size its tf.data pipeline cannot give: the gradient
  [90, 120, 30] (times the sample weight 0.18) is clipped to the norm, and
  SGD 0.01 applies it; the logged loss is Keras's weighted MSE."""
  model = _tf_privacy_model(kind, l2_norm_clip)
  loss = K.losses.MeanSquaredError()
  with pytest.warns(UserWarning, match="noise_multiplier=0"):
    model.compile(optimizer=K.optimizers.SGD(learning_rate=0.01), loss=loss)
  grad = np.array([90.0, 120.0, 30.0]) * (0.18 if weighted else 1.0)
  weights = [0.18] if weighted else None
  parts = (TRAIN_DATA, TRAIN_LABELS) + ((weights,) if weighted else ())
  expected_loss = float(loss(TRAIN_LABELS, model(TRAIN_DATA), weights))
  results = model.fit(tf.data.Dataset.from_tensors(parts), epochs=1,
                      verbose=0)
  expected = grad * min(1.0, l2_norm_clip / np.linalg.norm(grad)) * 0.01
  got = np.concatenate([w.ravel() for w in model.get_weights()])
  np.testing.assert_allclose(got, expected, rtol=1e-5)
  np.testing.assert_allclose(results.history["loss"][0], expected_loss,
                             rtol=1e-5)


@pytest.mark.parametrize("kind,num_microbatches,weighted", [
    ("DPModel", None, True), ("DPSequential", 2, True),
    ("DPSequential", 4, False)])
def test_microbatches(kind, num_microbatches, weighted):
  """dp_keras_model_test.py, testMicrobatches, with the population_size its
  tf.data pipeline cannot give: Dense(1) without bias from zeros, clip 1,
  SGD 1; each microbatch's mean of (weighted) per-example gradients
  2 x (w.x - y) is clipped, and the update is minus their mean."""
  x = np.array([[2.0, 3.0], [4.0, 5.0], [6.0, 7.0], [8.0, 9.0]], np.float32)
  y = np.array([[1.0], [3.0], [-2.0], [-4.0]], np.float32)
  w = np.array([0.1, 0.2, 0.3, 0.4], np.float32) if weighted else None
  layer = K.layers.Dense(1, use_bias=False, kernel_initializer="zeros")
  dp = dict(l2_norm_clip=1.0, noise_multiplier=0.0,
            num_microbatches=num_microbatches, population_size=4)
  if kind == "DPSequential":
    model = tfp.DPSequential(layers=[K.layers.Input((2,)), layer], **dp)
  else:
    inputs = K.Input(shape=(2,), dtype=tf.float32)
    model = tfp.DPModel(inputs=inputs, outputs=layer(inputs), **dp)
  with pytest.warns(UserWarning, match="noise_multiplier=0"):
    model.compile(optimizer=K.optimizers.SGD(learning_rate=1.0),
                  loss=K.losses.MeanSquaredError())
  parts = (x, y) + ((w,) if weighted else ())
  model.fit(tf.data.Dataset.from_tensors(parts), epochs=1, verbose=0)
  # TF Privacy's _compute_expected_gradients, at w0 = 0.
  grads = 2 * x * (0.0 - y) * (w if weighted else np.ones(4))[:, None]
  grads = grads.reshape(num_microbatches or 4, -1, 2).mean(axis=1)
  norms = np.linalg.norm(grads, axis=1)
  grads = grads * np.minimum(1.0 / norms, 1.0)[:, None]
  # The fast path's norms are certified, raised by their rounding bounds
  # (a few 1e-6 relative), and the mean of clipped gradients of norm about
  # 0.8 cancels to 0.03 in one coordinate: an absolute tolerance of 2e-6.
  np.testing.assert_allclose(model.get_weights()[0].ravel(),
                             -grads.mean(axis=0), rtol=1e-5, atol=2e-6)


def test_compile_without_population_size_takes_it_from_fit():
  x, y = _data(16)
  model = tfp.DPSequential(1.0, 1.1, layers=[K.layers.Input((3,)), _dense()])
  model.compile(optimizer=K.optimizers.SGD(0.1), loss="mse")
  model.fit(x, y, batch_size=8, epochs=1, verbose=0)
  samples = model.optimizer.ledger.to_dict()["samples"]
  assert [s["population_size"] for s in samples] == [16, 16]


def test_tf_privacy_only_arguments():
  with pytest.raises(ValueError, match="layer_registry"):
    tfp.DPSequential(1.0, 1.1, layer_registry=object(),
                     layers=[K.layers.Input((3,)), _dense()])
  with pytest.raises(ValueError, match="use_xla"):
    tfp.DPSequential(1.0, 1.1, True, layers=[K.layers.Input((3,)), _dense()])


def test_default_layer_registry_means_tf_dp_rules():
  """TF Privacy's tests and scripts pass make_default_layer_registry():
  accepted (tf_dp picks its fast rules itself); a registry of one's own
  layers is refused naming tf_dp.keras.fast."""
  from tf_dp.compat.tensorflow_privacy.privacy.fast_gradient_clipping import layer_registry  # pylint: disable=g-import-not-at-top
  registry = layer_registry.make_default_layer_registry()
  model = tfp.DPSequential(1.0, 1.1, layer_registry=registry,
                           layers=[K.layers.Input((3,)), _dense()])
  assert tf_dp.keras.is_private(model)
  with pytest.raises(ValueError, match="tf_dp.keras.fast"):
    registry.insert(K.layers.Dense, lambda *args: None)


def test_refusals_name_dp_sequential_and_its_compile():
  """The n a tf.data pipeline does not give, and a fixed order, are asked
  of DPSequential (or its compile), which takes no sampling: the fix names
  the DPOptimizer its compile accepts instead."""
  x, y = _data(16)
  model = tfp.DPSequential(1.0, 1.1, layers=[K.layers.Input((3,)), _dense()])
  model.compile(optimizer=K.optimizers.SGD(0.1), loss="mse")
  with pytest.raises(tf_dp.errors.PrivacyError) as refusal:
    model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(8), verbose=0)
  said = str(refusal.value)
  assert "DPSequential(..., population_size=len(x_train))" in said
  assert "DPSequential's compile takes it too" in said
  with pytest.raises(tf_dp.errors.SamplingMismatchError) as refusal:
    model.fit(x, y, batch_size=8, shuffle=False, verbose=0)
  assert ('model.compile(optimizer=tf_dp.DPOptimizer(<the optimizer>, ..., '
          'sampling="fixed_order")) (DPSequential does not take sampling)'
          ) in str(refusal.value)
