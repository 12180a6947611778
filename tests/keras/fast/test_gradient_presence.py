"""Variables without a gradient, and rules that leave a call out
(``tf_dp/keras/fast/gradient_presence.py``), in both Keras flavours.

1. A model whose loss depends on neither a weight its layer never reads nor
   the variables of a layer whose output it discards: Keras's tape gives
   them None and leaves them out of the update. The DP step does the same
   on both paths: with noise they keep their values bit for bit; without,
   the step equals the per-example loop (1e-5; clip 0.5 against record
   norms ~1), so no other variable's norm or sum is touched by them.
2. A rule whose clipped sum leaves out the second call of a shared layer
   (its variable's update would miss that call's part for every record)
   makes the fast path unavailable at trace time, naming the call; the
   built-in rule, which takes every call, passes the same check.
"""

import contextlib

import numpy as np
import pytest
import tensorflow as tf

import tf_dp
from tf_dp.dp_query import GaussianSumQuery
from tf_dp.errors import UnsupportedModelError
from tf_dp.keras import losses as losses_lib
from tf_dp.keras.fast import clipped_sum
from tf_dp.keras.fast import rules as rules_lib
from tests.keras import helpers
from tests.keras.fast import loop_reference
from tests.keras.fast.one_step import KERAS


def _model_with_idle_variables(K):
  """``head(scaled(x))`` plus ``side(x)`` computed and discarded; ``scaled``
  holds a weight it never reads. Returns the model and its three
  variables without a gradient."""

  class Scaled(K.layers.Layer):

    def build(self, input_shape):
      self.scale = self.add_weight(name="scale", shape=(input_shape[-1],),
                                   initializer="ones")
      self.idle = self.add_weight(name="idle", shape=(2,),
                                  initializer="ones")

    def call(self, inputs):
      return inputs * self.scale

  class WithSideBranch(K.Model):

    def __init__(self):
      super().__init__()
      init = lambda seed: K.initializers.GlorotUniform(seed=seed)
      self.scaled = Scaled()
      self.side = K.layers.Dense(2, kernel_initializer=init(1))
      self.head = K.layers.Dense(3, kernel_initializer=init(2))

    def call(self, inputs):
      self.side(inputs)  # Reaches nothing: no gradient.
      return self.head(self.scaled(inputs))

  model = WithSideBranch()
  model(np.zeros((1, 6), np.float32))
  return model, [model.scaled.idle, model.side.kernel, model.side.bias]


@pytest.mark.parametrize("method", ["fast", "vectorized"])
@pytest.mark.parametrize("K", KERAS)
def test_variables_without_gradient_are_left_out(K, method):
  x, y = helpers.make_data("dense", 4)
  loss = K.losses.SparseCategoricalCrossentropy(from_logits=True)
  for noise in (0.0, 1.0):
    model, idle = _model_with_idle_variables(K)
    before = [v.numpy().copy() for v in idle]
    others = [v for v in model.trainable_variables
              if all(v is not i for i in idle)]
    moving = [v.numpy().copy() for v in others]
    expected = loop_reference.reference_update(model, loss, x, y, 0.5, 1.0)
    model = tf_dp.keras.make_private(model)
    with (pytest.warns(UserWarning, match="noise_multiplier=0") if noise == 0
          else contextlib.nullcontext()):
      optimizer = tf_dp.DPOptimizer(
          K.optimizers.SGD(1.0), l2_norm_clip=0.5, noise_multiplier=noise,
          population_size=4, per_example_method=method)
    # Eager: the same step, without tracing it (seconds per case).
    model.compile(optimizer=optimizer, loss=loss, run_eagerly=True)
    model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
    for v, b in zip(idle, before):
      np.testing.assert_array_equal(v.numpy(), b, err_msg=v.name)
    for v, b in zip(others, moving):
      assert not np.array_equal(v.numpy(), b), v.name
    if noise == 0.0:
      for v, e in zip(model.trainable_variables, expected):
        np.testing.assert_allclose(np.asarray(v.numpy(), np.float64), e,
                                   atol=1e-5, err_msg=v.name)


class _FirstCallOnly(rules_lib.DenseRule):
  """A wrong rule: a shared Dense's norms and sums from its first call."""

  def prepare_calls(self, layer, taps, out_grads, records):
    return self.prepare(layer, taps[0], out_grads[0], records)


def _twice_applied(K, cls):
  layer = cls(6, kernel_initializer=K.initializers.GlorotUniform(seed=3),
              name="shared")
  inputs = K.layers.Input((6,))
  outputs = K.layers.Dense(3)(layer(layer(inputs)))
  return K.Model(inputs, outputs)


def _traced_sum(model, x, y):
  query = GaussianSumQuery(1.0, 0.0)
  params = query.derive_sample_params(query.initial_global_state())
  loss_fn = losses_lib.per_example_loss_fn(model)
  step = tf.function(lambda x, y: clipped_sum.clipped_batch_sum(
      model, loss_fn, x, y, None, query, params)[0], autograph=False)
  return step(tf.constant(x), tf.constant(y))


@pytest.mark.parametrize("K", KERAS)
def test_a_rule_that_leaves_out_a_call_is_refused_at_trace_time(K):
  class SharedDense(K.layers.Dense):

    def call(self, inputs):  # Its own call: no rule inherited from Dense.
      return super().call(inputs)

  rules_lib.register_rule(SharedDense, _FirstCallOnly())
  x, y = helpers.make_data("dense", 4)
  model = _twice_applied(K, SharedDense)
  model.compile(loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  with pytest.raises(clipped_sum.FastPathUnavailable,
                     match="does not depend on call 2 of layer 'shared'"):
    _traced_sum(model, x, y)
  rules_lib.register_rule(SharedDense, rules_lib.DenseRule())
  _traced_sum(model, x, y)  # Every call taken: the check passes.
  rules_lib.register_rule(SharedDense, _FirstCallOnly())
  with pytest.warns(UserWarning, match="noise_multiplier=0"):
    model = loop_reference.compile_fast(
        K, model, 4, K.losses.SparseCategoricalCrossentropy(from_logits=True),
        1.0)
  with pytest.raises(UnsupportedModelError, match="call 2 of layer"):
    model.fit(x, y, batch_size=4, epochs=1, verbose=0)
