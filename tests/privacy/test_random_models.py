"""Neighbour tests on random small models drawn by hypothesis.

Each example draws a stack of Dense / Conv1D / LayerNormalization layers
with random widths and activations, a loss, a clip, a batch size, a
per-example path and the replaced example; one noise-free step of SGD(1) on
D and on D' (one example replaced) must move the clipped sum by at most 2C.
"""

import warnings

from hypothesis import given
from hypothesis import HealthCheck
from hypothesis import settings
from hypothesis import strategies as st
import numpy as np
import pytest

import tf_dp
from tests.keras import helpers

KERAS = helpers.keras_modules()
LOSSES = ("mse", "mae", "huber", "binary_crossentropy", "poisson", "hinge",
          "sparse_categorical_crossentropy")
TOLERANCE = 1e-4  # float32 rounding of sums of a few clipped gradients.


@st.composite
def model_specs(draw):
  sequence = draw(st.booleans())
  layers = draw(st.lists(st.tuples(
      st.sampled_from(["dense", "layernorm"] + (["conv1d"] if sequence
                                                else [])),
      st.integers(1, 5), st.sampled_from([None, "tanh", "relu"])),
                         min_size=1, max_size=3))
  return dict(
      sequence=sequence, layers=layers, loss=draw(st.sampled_from(LOSSES)),
      clip=draw(st.sampled_from([0.01, 0.3, 3.0])),
      batch=draw(st.integers(2, 6)),
      method=draw(st.sampled_from(["fast", "vectorized"])),
      replaced=draw(st.integers(0, 5)), seed=draw(st.integers(0, 10 ** 6)))


def _model(K, spec):
  init = K.initializers.GlorotUniform(seed=spec["seed"] % 1000)
  layers = [K.Input((4, 3) if spec["sequence"] else (3,))]
  for kind, width, activation in spec["layers"]:
    if kind == "dense":
      layers.append(K.layers.Dense(width, activation=activation,
                                   kernel_initializer=init))
    elif kind == "conv1d":
      layers.append(K.layers.Conv1D(width, 2, padding="same",
                                    activation=activation,
                                    kernel_initializer=init))
    else:
      layers.append(K.layers.LayerNormalization())
  if spec["sequence"]:
    layers.append(K.layers.Flatten())
  classes = 3 if spec["loss"] == "sparse_categorical_crossentropy" else 1
  layers.append(K.layers.Dense(classes, kernel_initializer=init))
  return K.Sequential(layers)


def _data(spec, rng):
  n = spec["batch"]
  shape = (n, 4, 3) if spec["sequence"] else (n, 3)
  x = rng.normal(size=shape).astype("float32") * 3
  if spec["loss"] == "sparse_categorical_crossentropy":
    y = rng.integers(0, 3, n).astype("int32")
  elif spec["loss"] in ("binary_crossentropy", "hinge"):
    y = rng.integers(0, 2, n).astype("float32")
  else:
    y = rng.uniform(0, 20, n).astype("float32")
  return x, y


def _update(K, spec, initial, x, y):
  model = _model(K, spec)
  model.set_weights(initial)
  model = tf_dp.keras.make_private(model)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)  # noise_multiplier=0.
    optimizer = tf_dp.DPOptimizer(
        K.optimizers.SGD(1.0), l2_norm_clip=spec["clip"],
        noise_multiplier=0.0, population_size=100,
        per_example_method=spec["method"])
  model.compile(optimizer=optimizer, loss=spec["loss"])
  before = np.concatenate([v.numpy().ravel()
                           for v in model.trainable_variables])
  model.fit(x, y, batch_size=len(x), shuffle=False, verbose=0)
  return before - np.concatenate([v.numpy().ravel()
                                  for v in model.trainable_variables])


@pytest.mark.parametrize("K", KERAS)
@settings(max_examples=6, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(spec=model_specs())
def test_random_model_moves_the_clipped_sum_by_at_most_2c(K, spec):
  rng = np.random.default_rng(spec["seed"])
  x, y = _data(spec, rng)
  x2, y2 = _data(spec, rng)
  j = spec["replaced"] % spec["batch"]
  xn, yn = x.copy(), y.copy()
  xn[j], yn[j] = x2[j], y2[j]
  initial = _model(K, spec).get_weights()
  change = spec["batch"] * np.linalg.norm(
      _update(K, spec, initial, x, y) - _update(K, spec, initial, xn, yn))
  assert change <= 2 * spec["clip"] * (1 + TOLERANCE), (
      f"{spec}: one example moved the clipped sum by "
      f"{change / (2 * spec['clip']):.3f} times 2C")
