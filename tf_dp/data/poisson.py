"""Poisson-sampled batches as ``tf.data``: the sampling the accountant assumes.

Each step includes every example independently with probability ``q``. The
sample has a random size, so it is padded to ``max_batch_size`` with examples
of weight 0 (a fixed shape: graphs are not retraced); weights are 1 for the
sampled examples. Padding rows have zero loss, hence zero gradient, so they
contribute nothing to the clipped sum. Train with
``DPOptimizer(..., sampling="poisson", sampling_probability=q)``; the ledger
then records Poisson samples and the average uses the public denominator
``q * n``.

The sampling draws come from a seed taken from OS entropy (unless given):
predictable sampling would weaken the amplification the accountant credits.
"""

import math
import os

import numpy as np
import tensorflow as tf


def default_max_batch_size(n, q):
  """Expected size + 8 standard deviations (overflow odds below 1e-15)."""
  mean = q * n
  return int(min(n, math.ceil(mean + 8 * math.sqrt(mean * (1 - q)) + 8)))


def poisson_sampled_batches(x, y, sampling_probability, num_steps,
                            max_batch_size=None, seed=None):
  """A dataset of ``num_steps`` Poisson samples ``(x, y, weight)``.

  Privacy contract: every example is in each step's sample independently
  with probability ``sampling_probability``; steps are independent. A sample
  larger than ``max_batch_size`` raises an error instead of being truncated
  (truncation would change the sampling the ledger records).

  Args:
    x, y: In-memory arrays (or nests of arrays) with ``n`` examples.
    sampling_probability: q in (0, 1].
    num_steps: Number of samples (steps); ``round(epochs / q)`` for epochs.
    max_batch_size: Padded size; by default mean + 8 sd.
    seed: None (OS entropy) or an int for reproducible tests.
  """
  n = len(tf.nest.flatten(x)[0])
  if not 0 < sampling_probability <= 1:
    raise ValueError("sampling_probability must lie in (0, 1]; got "
                     f"{sampling_probability!r}.")
  if max_batch_size is None:
    max_batch_size = default_max_batch_size(n, sampling_probability)
  key = (int(np.frombuffer(os.urandom(8), np.int64)[0]) if seed is None
         else int(seed))
  xs = tf.nest.map_structure(tf.constant, x)
  ys = tf.nest.map_structure(tf.constant, y)

  def sample(step):
    draws = tf.random.stateless_uniform(
        [n], seed=tf.stack([tf.constant(key, tf.int64), step]))
    chosen = tf.where(draws < sampling_probability)[:, 0]
    size = tf.shape(chosen)[0]
    tf.debugging.assert_less_equal(
        size, max_batch_size, message=(
            "tf_dp: a Poisson sample exceeded max_batch_size; raise it."))
    pad = max_batch_size - size
    index = tf.concat([chosen, tf.zeros([pad], tf.int64)], axis=0)
    weight = tf.concat([tf.ones([size]), tf.zeros([pad])], axis=0)
    gather = lambda t: tf.gather(t, index)
    return (tf.nest.map_structure(gather, xs),
            tf.nest.map_structure(gather, ys), weight)

  return tf.data.Dataset.range(num_steps).map(sample)
