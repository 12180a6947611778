"""Users for the user-level tests: their rows, data and the per-user loop
reference of the clipped sum (shared by tests/keras/test_user_level.py and
the two-replica worker of tests/distribute)."""

import numpy as np
import tensorflow as tf

from tests.keras import helpers

K_ROWS = 3  # max_examples_per_user: rows per user in a batch.


def user_layout(kind, users, seed=0):
  """``users`` blocks of K_ROWS rows: user u has 1 + u % K_ROWS examples,
  the rest of its block is padding (zeros, weight 0)."""
  x, y = helpers.make_data(kind, users * K_ROWS, seed=seed)
  w = np.zeros(users * K_ROWS, np.float32)
  for u in range(users):
    w[u * K_ROWS:u * K_ROWS + 1 + u % K_ROWS] = 1.0
  x = np.where(w.reshape((-1,) + (1,) * (x.ndim - 1)) > 0, x, 0).astype(
      x.dtype)
  return x, np.where(w > 0, y, 0).astype(y.dtype), w


def user_gradients(model, x, y, w):
  """Each user's gradient, float64: the sum over the user's rows of the
  weighted example losses' gradients, one example at a time."""
  loss_fn = lambda yt, yp: tf.keras.backend.sparse_categorical_crossentropy(
      yt, yp, from_logits=True)
  variables = model.trainable_variables
  out = []
  for u in range(len(x) // K_ROWS):
    total = [np.zeros(v.shape, np.float64) for v in variables]
    for i in range(u * K_ROWS, (u + 1) * K_ROWS):
      if w[i] == 0:
        continue
      with tf.GradientTape() as tape:
        loss = w[i] * tf.reduce_sum(loss_fn(y[i:i + 1],
                                            model(x[i:i + 1], training=False)))
      total = [t + np.asarray(tf.convert_to_tensor(g), np.float64)
               for t, g in zip(total, tape.gradient(loss, variables))]
    out.append(total)
  return out


def clipped_user_sum(model, x, y, w, clip):
  """The reference: sum over users of min(1, C / |g_u|) g_u."""
  total = None
  for grads in user_gradients(model, x, y, w):
    norm = np.sqrt(sum(np.sum(g * g) for g in grads))
    scale = min(1.0, clip / norm) if norm > 0 else 1.0
    scaled = [g * scale for g in grads]
    total = scaled if total is None else [a + b for a, b in zip(total, scaled)]
  return total


def user_data(users=12, seed=0):
  """Examples of ``users`` users, user u holding 1 + u % 5 of them."""
  ids = np.repeat(np.arange(users), [1 + u % 5 for u in range(users)])
  x, y = helpers.make_data("dense", len(ids), seed=seed)
  return x, y, ids
