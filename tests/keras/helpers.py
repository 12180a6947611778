"""Shared helpers for the Keras tests: flavours, small models, references."""

import numpy as np
import pytest
import tensorflow as tf

from tf_dp.keras import backend


def keras_modules():
  mods = []
  if backend.keras3_module() is not None:
    mods.append(pytest.param(backend.keras3_module(), id="keras3"))
  if backend.keras2_module() is not None:
    mods.append(pytest.param(backend.keras2_module(), id="keras2"))
  return mods


def compile_dp(K, model, population_size, learning_rate=0.1,
               l2_norm_clip=1.0, noise_multiplier=1.0, **dp_kwargs):
  """``model`` converted with make_private and
  compiled with a DP SGD."""
  import tf_dp  # pylint: disable=g-import-not-at-top
  model = tf_dp.keras.make_private(model)
  model.compile(
      optimizer=tf_dp.DPOptimizer(
          K.optimizers.SGD(learning_rate), l2_norm_clip=l2_norm_clip,
          noise_multiplier=noise_multiplier, population_size=population_size,
          **dp_kwargs),
      loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  return model


def compile_dp_sgd(K, model, n, clip, noise, lr=1.0, **kwargs):
  """``compile_dp`` with the short names of the per-example-loop tests:
  ``n`` examples, clip, noise multiplier, SGD learning rate ``lr``."""
  return compile_dp(K, model, n, learning_rate=lr, l2_norm_clip=clip,
                    noise_multiplier=noise, **kwargs)


def weights(model):
  """Copies of ``model``'s trainable variables (numpy)."""
  return [v.numpy().copy() for v in model.trainable_variables]


def float64_weights(model):
  """``model``'s trainable variables as float64 numpy arrays."""
  return [np.asarray(v.numpy(), np.float64)
          for v in model.trainable_variables]


def ledger_samples(model):
  """The samples the ledger of ``model``'s DP optimizer recorded."""
  return model.optimizer.ledger.to_dict()["samples"]


def build_model(K, kind, seed=0):
  """A small model of the given kind with deterministic initial weights."""
  init = K.initializers.GlorotUniform(seed=seed)
  if kind == "dense":
    layers = [K.layers.Input((6,)), K.layers.Dense(5, activation="tanh",
                                                   kernel_initializer=init),
              K.layers.Dense(3, kernel_initializer=init)]
  elif kind == "conv":
    layers = [K.layers.Input((8, 8, 1)),
              K.layers.Conv2D(2, 3, activation="tanh",
                              kernel_initializer=init),
              K.layers.Flatten(), K.layers.Dense(3, kernel_initializer=init)]
  elif kind == "embedding":
    layers = [K.layers.Input((5,), dtype="int32"),
              K.layers.Embedding(10, 4, embeddings_initializer=init),
              K.layers.Flatten(), K.layers.Dense(3, kernel_initializer=init)]
  elif kind == "rnn":
    layers = [K.layers.Input((5, 3)),
              K.layers.SimpleRNN(
                  4, kernel_initializer=init,
                  recurrent_initializer=K.initializers.Orthogonal(seed=seed)),
              K.layers.Dense(3, kernel_initializer=init)]
  else:
    raise ValueError(kind)
  return K.Sequential(layers)


def make_data(kind, n, seed=0):
  rng = np.random.default_rng(seed)
  if kind == "dense":
    x = rng.normal(size=(n, 6)).astype("float32")
  elif kind == "conv":
    x = rng.normal(size=(n, 8, 8, 1)).astype("float32")
  elif kind == "embedding":
    x = rng.integers(0, 10, size=(n, 5)).astype("int32")
  else:
    x = rng.normal(size=(n, 5, 3)).astype("float32")
  y = rng.integers(0, 3, size=(n,)).astype("int32")
  return x, y


def record_grads(model, x, y, microbatch=1):
  """Gradients of each record's mean loss (float64), by a Python loop."""
  loss_fn = lambda yt, yp: tf.keras.backend.sparse_categorical_crossentropy(
      yt, yp, from_logits=True)
  variables = model.trainable_variables
  for i in range(len(x) // microbatch):
    xi = x[i * microbatch:(i + 1) * microbatch]
    yi = y[i * microbatch:(i + 1) * microbatch]
    with tf.GradientTape() as tape:
      loss = tf.reduce_mean(loss_fn(yi, model(xi, training=False)))
    yield [np.asarray(tf.convert_to_tensor(g), np.float64)
           for g in tape.gradient(loss, variables)]


def reference_update(model, x, y, clip, lr, microbatch=1):
  """One DP-SGD step (no noise) by a Python loop: clip each record, average."""
  variables = model.trainable_variables
  total = [np.zeros(v.shape, np.float64) for v in variables]
  n_records = len(x) // microbatch
  for grads in record_grads(model, x, y, microbatch):
    norm = np.sqrt(sum(np.sum(g * g) for g in grads))
    scale = min(1.0, clip / norm) if norm > 0 else 1.0
    total = [t + g * scale for t, g in zip(total, grads)]
  return [np.asarray(v.numpy(), np.float64) - lr * t / n_records
          for v, t in zip(variables, total)]
