"""Tests of tf_dp.keras.fast.taps: what TapSession records of one batched
forward pass, on both Keras flavours.

References: each Dense layer's input and pre-activation ``x W + b``
computed in numpy from the layer's weights; the same model's output
without taps.
"""

import numpy as np
import pytest
import tensorflow as tf

from tests.keras import helpers
from tf_dp.keras.fast import taps as taps_lib

KERAS = helpers.keras_modules()


def _model(K):
  init = K.initializers.GlorotUniform(seed=0)
  inputs = K.layers.Input((4,))
  first = K.layers.Dense(5, activation="tanh", kernel_initializer=init)
  shared = K.layers.Dense(5, activation="relu", kernel_initializer=init)
  out = shared(shared(first(inputs)))  # ``shared`` is called twice.
  return K.Model(inputs, out), first, shared


@pytest.mark.parametrize("K", KERAS)
def test_taps_record_inputs_and_pre_activations_and_leave_the_output(K):
  model, first, shared = _model(K)
  x = np.random.default_rng(0).normal(size=(3, 4)).astype(np.float32)
  plain = model(x).numpy()
  with taps_lib.TapSession([first, shared], {id(first): True}) as session:
    tapped = model(x).numpy()
  np.testing.assert_allclose(tapped, plain, rtol=1e-6)

  w1, b1 = (v.numpy() for v in first.weights)
  z1 = x @ w1 + b1
  tap = session.taps[id(first)]
  np.testing.assert_allclose(taps_lib.tensors_of(tap)[0], x)
  np.testing.assert_allclose(tap.output, z1, rtol=1e-5, atol=1e-6)  # not tanh

  w2, b2 = (v.numpy() for v in shared.weights)
  h1 = np.maximum(np.tanh(z1) @ w2 + b2, 0)
  h2 = np.maximum(h1 @ w2 + b2, 0)
  calls = session.all_taps[id(shared)]
  assert session.call_counts == {id(first): 1, id(shared): 2}
  assert [c.layer for c in calls] == [shared, shared]
  np.testing.assert_allclose(calls[0].output, h1, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(calls[1].output, h2, rtol=1e-5, atol=1e-6)
  assert session.taps[id(shared)] is calls[1]
  # The activation is restored after the pre-activation call.
  assert first.activation is not None and first.activation(
      tf.constant(1.0)).numpy() == pytest.approx(np.tanh(1.0))


@pytest.mark.parametrize("K", KERAS)
def test_the_layers_call_is_restored_after_the_session(K):
  model, first, shared = _model(K)
  assert "call" not in first.__dict__
  with pytest.raises(RuntimeError, match="inside"):
    with taps_lib.TapSession([first, shared], {}) as session:
      assert "call" in first.__dict__
      assert session.original_call(first)[1] is False
      raise RuntimeError("inside")
  assert "call" not in first.__dict__ and "call" not in shared.__dict__
  with taps_lib.TapSession([first], {}) as session:
    model(np.zeros((1, 4), np.float32))
  model(np.zeros((1, 4), np.float32))
  assert session.call_counts == {id(first): 1}  # no recording afterwards


@pytest.mark.parametrize("K", KERAS)
def test_outside_reads_separates_variables_read_inside_tapped_calls(K):
  """Variables read inside a tapped call land in ``reads`` of that layer;
  the tape sees only what is read outside the tapped calls."""
  model, first, shared = _model(K)
  outside = tf.Variable(2.0)
  x = tf.ones((2, 4))
  with taps_lib.TapSession([first], {}) as session:
    with session.outside_reads() as tape:
      y = model(x) * outside
  # A tape watches the resource variable under a Keras 3 variable: both
  # share the handle.
  handle = lambda v: id(getattr(v, "handle", v))
  watched = {handle(v) for v in tape.watched_variables()}
  inside = {handle(v) for v in session.reads[id(first)]}
  first_vars = {handle(v) for v in first.trainable_variables}
  shared_vars = {handle(v) for v in shared.trainable_variables}
  assert inside == first_vars
  assert first_vars.isdisjoint(watched)
  assert shared_vars | {handle(outside)} <= watched
  assert y.shape == (2, 5)
