"""Gaussian noise from a seed kept in the query's explicit state.

Noise is drawn with stateless random ops from a seed ``[key, counter]`` that
lives in the query's global state: the key comes from the operating system's
entropy unless the user fixes it, and the counter advances once per noised
result. Consequences: ``tf.random.set_seed`` in a user's script does not make
the privacy noise reproducible; every sample gets fresh noise; and the noise
is identical on every replica because it is drawn once, cross-replica.
"""

import os
import warnings

import numpy as np
import tensorflow as tf


def new_noise_seed(noise_seed=None):
  """Returns the initial ``[key, counter]`` seed tensor (int64).

  Args:
    noise_seed: ``None`` (default) for a key from OS entropy; an int for a
      reproducible key, with a warning: a noise seed that is known or reused
      lets anyone who knows it subtract the noise, voiding the guarantee.
  """
  if noise_seed is None:
    key = int(np.frombuffer(os.urandom(8), dtype=np.int64)[0])
  else:
    warnings.warn(
        "A fixed noise_seed makes the DP noise reproducible; anyone who knows "
        "it can remove the noise. Use it only for tests and debugging.",
        UserWarning, stacklevel=3)
    key = int(noise_seed)
  return tf.constant([key, 0], dtype=tf.int64)


def advance(seed):
  """The seed for the next noised result."""
  return seed + tf.constant([0, 1], dtype=tf.int64)


def add_gaussian_noise(structure, stddev, seed):
  """Adds N(0, stddev^2) independently to every element of ``structure``."""
  leaves = tf.nest.flatten(structure)
  noised = []
  for i, x in enumerate(leaves):
    x = tf.convert_to_tensor(x)
    leaf_seed = tf.random.experimental.stateless_fold_in(seed, i)
    draw = tf.random.stateless_normal(tf.shape(x), seed=leaf_seed,
                                      dtype=tf.float32)
    noised.append(x + tf.cast(draw * tf.cast(stddev, tf.float32), x.dtype))
  return tf.nest.pack_sequence_as(structure, noised)
