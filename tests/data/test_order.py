"""``tf_dp.data.order.batch_order`` reads a pipeline's graph: only a fresh
shuffle of all the rows, before the batching, every epoch, counts as
random."""

import numpy as np
import pytest
import tensorflow as tf

from tf_dp.data import order

N = 100
ROWS = np.arange(N, dtype=np.float32)


def rows():
  return tf.data.Dataset.from_tensor_slices((ROWS, ROWS))


def shuffle_and_repeat(data):
  return data.apply(tf.data.experimental.shuffle_and_repeat(N))


RANDOM = {
    "shuffle then batch": lambda: rows().shuffle(N).batch(10).prefetch(1),
    "map and repeat between": lambda: rows().shuffle(N).repeat(2).map(
        lambda a, b: (a, b)).batch(10),
    "padded batch": lambda: rows().shuffle(N).padded_batch(10),
    "parallel batch": lambda: rows().shuffle(N).batch(10,
                                                      num_parallel_calls=2),
    "with options": lambda: rows().shuffle(N).batch(10).with_options(
        tf.data.Options()),
    "shuffle_and_repeat": lambda: shuffle_and_repeat(rows()).batch(10),
}
FIXED = {
    "no shuffle": (lambda: rows().batch(10), "in the order they come"),
    "buffer of 1": (lambda: rows().shuffle(1).batch(10), "holds 1 of the n"),
    "small buffer": (lambda: rows().shuffle(50).batch(10), "holds 50 of"),
    "drawn once": (lambda: rows().shuffle(
        N, reshuffle_each_iteration=False).batch(10),
                   "reshuffle_each_iteration=False"),
    "after batching": (lambda: rows().batch(10).shuffle(10),
                       "after the batching"),
    "cache between": (lambda: rows().shuffle(N).cache().batch(10),
                      "cache between"),
    "repeat below": (lambda: rows().repeat(2).shuffle(2 * N).batch(10),
                     "repeats the rows before shuffling"),
    # Batches of 30 over passes of 100: the 4th batch holds the last 10 of
    # pass 1 and the first 20 of pass 2, which may repeat one of them.
    "repeat between, straddling": (
        lambda: rows().shuffle(N).repeat(2).batch(30),
        "a batch across two passes may hold an example twice"),
    "shuffle_and_repeat, straddling": (
        lambda: shuffle_and_repeat(rows()).batch(30),
        "a batch across two passes may hold an example twice"),
    "unbatch between": (lambda: rows().shuffle(N).batch(10).unbatch().batch(
        10), "UnbatchDataset op"),
    "generator": (lambda: tf.data.Dataset.from_generator(
        lambda: iter([(ROWS[:10], ROWS[:10])]), output_signature=(
            tf.TensorSpec([10]), tf.TensorSpec([10]))), "batches nothing"),
}


@pytest.mark.parametrize("name", sorted(RANDOM))
def test_a_fresh_full_shuffle_before_batching_is_random(name):
  found = order.batch_order(RANDOM[name](), N)
  assert found == order.BatchOrder(True, "", None)


@pytest.mark.parametrize("name", sorted(FIXED))
def test_anything_else_is_not_shown_random(name):
  build, reason = FIXED[name]
  found = order.batch_order(build(), N)
  assert not found.random
  assert reason in found.reason


def test_the_buffer_is_checked_against_n_only_when_n_is_known():
  assert order.batch_order(rows().shuffle(50).batch(10), None).random
  assert order.batch_order(rows().shuffle(50).batch(10), 50).random


def test_fixed_seeds_are_reported():
  found = order.batch_order(rows().shuffle(N, seed=4).batch(10), N)
  assert found.random and found.seed is not None and found.seed[1] == 4


def test_one_batch_of_every_example_counts_whatever_the_order():
  """Its lot holds all n (q = 1): nothing is amplified."""
  assert order.batch_order(rows().batch(N), N).random
  assert not order.batch_order(rows().batch(N - 1), N).random
  # Dataset.from_tensors of all n rows, passed unchanged (TF Privacy's
  # tests feed their data so).
  whole = tf.data.Dataset.from_tensors((ROWS, ROWS))
  assert order.batch_order(whole, N).random
  assert order.batch_order(whole.repeat(3).prefetch(1), N).random
  assert not order.batch_order(whole, N + 1).random
  assert not order.batch_order(whole, None).random
  # A map may take some of the rows, always the same ones: not all n.
  assert not order.batch_order(whole.map(lambda a, b: (a[:10], b[:10])),
                               N).random


def test_a_straddling_batch_can_hold_an_example_twice():
  """Why the straddling pipelines are refused: the batch across the two
  passes (10 rows of one shuffle, 20 of another) repeats an example with
  probability 1 - C(90, 20) / C(100, 20) = 0.90 per draw; 20 draws all
  without a repeat have probability 1e-20."""
  tf.random.set_seed(7)
  repeats = 0
  for _ in range(20):
    straddling = list(rows().shuffle(N).repeat(2).batch(30))[3][0].numpy()
    repeats += len(set(straddling)) < len(straddling)
  assert repeats > 0
