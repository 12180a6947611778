"""A DP-SGD step by a Python loop over examples, as the reference for the
fast path on any model (inputs and labels may be dicts, labels and sample
weights per token).

Each record's loss is the compiled Keras loss on a batch holding that
example alone (the privacy contract of ``tf_dp.keras.losses``); its gradient
is computed, clipped to ``clip`` and averaged, in float64.
"""

import numpy as np
import pytest
import tensorflow as tf


def take(structure, i):
  """Example ``i`` of a nest of arrays, as a batch of one."""
  return tf.nest.map_structure(lambda t: t[i:i + 1], structure)


def record_gradients(model, loss, x, y, sample_weight=None):
  """float64 gradients of each example's loss, one example at a time."""
  n = len(tf.nest.flatten(x)[0])
  variables = model.trainable_variables
  for i in range(n):
    weight = None if sample_weight is None else take(sample_weight, i)
    with tf.GradientTape() as tape:
      value = loss(take(y, i), model(take(x, i), training=False),
                   sample_weight=weight)
    grads = tape.gradient(value, variables)
    yield [np.zeros(v.shape) if g is None
           else np.asarray(tf.convert_to_tensor(g), np.float64)
           for g, v in zip(grads, variables)]


def reference_update(model, loss, x, y, clip, learning_rate,
                     sample_weight=None):
  """The variables after one noiseless DP-SGD step (a loop over examples)."""
  variables = model.trainable_variables
  total = [np.zeros(v.shape) for v in variables]
  n = 0
  for grads in record_gradients(model, loss, x, y, sample_weight):
    norm = np.sqrt(sum(np.sum(g * g) for g in grads))
    scale = min(1.0, clip / norm) if norm > 0 else 1.0
    total = [t + scale * g for t, g in zip(total, grads)]
    n += 1
  return [np.asarray(v.numpy(), np.float64) - learning_rate * t / n
          for v, t in zip(variables, total)]


def compile_fast(K, model, population_size, loss, clip, learning_rate=1.0,
                 noise_multiplier=0.0, run_eagerly=False, **dp_kwargs):
  """make_private + compile on the fast path (no first-fit self-check:
  its reference runs the model under tf.vectorized_map, which Keras 3
  EinsumDense layers must not do under TF 2.21's oneDNN). ``run_eagerly``
  skips tracing the step: seconds instead of a minute for a transformer."""
  import tf_dp  # pylint: disable=g-import-not-at-top
  model = tf_dp.keras.make_private(model)
  model.compile(
      optimizer=tf_dp.DPOptimizer(
          K.optimizers.SGD(learning_rate), l2_norm_clip=clip,
          noise_multiplier=noise_multiplier, population_size=population_size,
          per_example_method="fast", **dp_kwargs),
      loss=loss, run_eagerly=run_eagerly)
  return model


def fast_step_matches_loop(K, model, x, y, clip, loss=None,
                           sample_weight=None, atol=1e-5, run_eagerly=False):
  """One fast-path fit step (no noise, learning rate 1) against
  ``reference_update``; returns the clipping plan by layer name.

  ``atol`` 1e-5: float32 round-off of sums over a few examples, far below
  a clipping error (norms ~1 against ``clip``: a wrong norm or a missing
  term moves weights by > 1e-2).
  """
  from tf_dp.keras.fast import clipped_sum  # pylint: disable=g-import-not-at-top
  loss = loss or K.losses.SparseCategoricalCrossentropy(from_logits=True)
  n = len(tf.nest.flatten(x)[0])
  expected = reference_update(model, loss, x, y, clip, 1.0, sample_weight)
  with pytest.warns(UserWarning, match="noise_multiplier=0"):
    model = compile_fast(K, model, n, loss, clip, run_eagerly=run_eagerly)
  model.fit(x, y, sample_weight=sample_weight, batch_size=n, epochs=1,
            shuffle=False, verbose=0)
  for v, e in zip(model.trainable_variables, expected):
    np.testing.assert_allclose(np.asarray(v.numpy(), np.float64), e,
                               atol=atol, err_msg=v.path if hasattr(
                                   v, "path") else v.name)
  return {name: path for name, _, path in clipped_sum.clipping_plan(model)}
