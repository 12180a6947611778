"""What the lot samplers share: fresh lot seeds, gathering and splitting.

A sampler chooses, from ``n`` uniforms drawn for a lot, the rows of the lot
(and optionally a weight per row); this module draws the uniforms from a
per-lot seed that is fresh on every iteration of the dataset, gathers the
rows and splits the lot into ``batches_per_lot`` batches of equal size.
"""

import os

import numpy as np
import tensorflow as tf

from tf_dp.analysis import checks


def check_batches_per_lot(batches_per_lot):
  return checks.check_positive_int(
      "batches_per_lot", batches_per_lot,
      " It is the DPOptimizer's gradient_accumulation_steps.")


def lot_dataset(x, y, num_lots, seed, batches_per_lot, choose, stream):
  """``num_lots`` lots as ``batches_per_lot`` batches each.

  Args:
    x, y: In-memory arrays (or nests) with ``n`` examples.
    num_lots: Number of lots.
    seed: None (OS entropy) or an int for reproducible tests.
    batches_per_lot: Batches each lot is split into.
    choose: ``f(uniforms [n]) -> (row indices, weights or None)``; the number
      of rows must be a multiple of ``batches_per_lot``.
    stream: An int that separates the samplers' random streams.
  """
  key = (int(np.frombuffer(os.urandom(8), np.int64)[0]) if seed is None
         else int(seed))
  n = len(tf.nest.flatten(x)[0])
  xs = tf.nest.map_structure(tf.constant, x)
  ys = tf.nest.map_structure(tf.constant, y)

  def sample(lot_seed):
    draws = tf.random.stateless_uniform(
        [n], seed=tf.stack([lot_seed, tf.constant(stream, tf.int64)]))
    index, weight = choose(draws)
    split = lambda t: tf.reshape(t, tf.concat(
        [[batches_per_lot, -1], tf.shape(t)[1:]], 0))
    gather = lambda t: split(tf.gather(t, index))
    out = (tf.nest.map_structure(gather, xs),
           tf.nest.map_structure(gather, ys))
    return out if weight is None else out + (split(weight),)

  # Fresh lot seeds on every iteration: re-iterating the dataset (e.g. one
  # pass per Keras epoch) never repeats a sample.
  lot_seeds = tf.data.Dataset.random(seed=key,
                                     rerandomize_each_iteration=True)
  return lot_seeds.take(num_lots).map(sample).unbatch()
