"""Fixed-size samples as ``tf.data``: an independent uniform subset per lot.

Keras's ``fit(shuffle=True)`` takes each example once per epoch: its
batches are not independent samples, and the fixed-size accountant's
guarantee does not strictly apply to them (Chua et al. 2024). This sampler
draws what the accountant assumes: every lot is a uniformly random subset
of exactly ``batch_size * batches_per_lot`` distinct examples, independent
of every other lot. Train with ``DPOptimizer(..., sampling="fixed_size")``.
"""

import os

import numpy as np
import tensorflow as tf


def fixed_size_sampled_batches(x, y, batch_size, num_steps, seed=None,
                               batches_per_lot=1):
  """A dataset of ``num_steps`` lots of uniformly sampled examples.

  Privacy contract: each lot is a uniformly random subset (without
  replacement) of ``batch_size * batches_per_lot`` of the ``n`` examples,
  drawn independently of all other lots, also across re-iterations of the
  dataset; the lot is split into ``batches_per_lot`` batches.

  Args:
    x, y: In-memory arrays (or nests of arrays) with ``n`` examples.
    batch_size: Examples per batch.
    num_steps: Number of lots.
    seed: None (OS entropy) or an int for reproducible tests.
    batches_per_lot: Batches per lot (``gradient_accumulation_steps``).
  """
  n = len(tf.nest.flatten(x)[0])
  lot = int(batch_size) * int(batches_per_lot)
  if isinstance(batches_per_lot, bool) or int(batches_per_lot) < 1:
    raise ValueError("batches_per_lot must be an integer >= 1; got "
                     f"{batches_per_lot!r}.")
  if not 1 <= lot <= n:
    raise ValueError(f"batch_size * batches_per_lot must lie in [1, n={n}]; "
                     f"got {lot}.")
  key = (int(np.frombuffer(os.urandom(8), np.int64)[0]) if seed is None
         else int(seed))
  xs = tf.nest.map_structure(tf.constant, x)
  ys = tf.nest.map_structure(tf.constant, y)

  def sample(lot_seed):
    draws = tf.random.stateless_uniform(
        [n], seed=tf.stack([lot_seed, tf.constant(1, tf.int64)]))
    index = tf.math.top_k(draws, lot).indices
    split = lambda t: tf.reshape(t, tf.concat(
        [[batches_per_lot, batch_size], tf.shape(t)[1:]], 0))
    gather = lambda t: split(tf.gather(t, index))
    return (tf.nest.map_structure(gather, xs),
            tf.nest.map_structure(gather, ys))

  lot_seeds = tf.data.Dataset.random(seed=key,
                                     rerandomize_each_iteration=True)
  return lot_seeds.take(num_steps).map(sample).unbatch()
