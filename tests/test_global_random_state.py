"""tests/conftest.py puts back the global random state each test changed:
a seed one test sets does not hold for the tests that run after it (in the
same pytest-xdist worker: every file given to it later).

The two tests run in file order: the first sets every global seed, the
second finds none of them set.
"""

import random

import numpy as np
import tensorflow as tf
from tensorflow.python.eager import context  # pylint: disable=g-direct-tensorflow-import

from tests.keras import helpers

KERAS = [p.values[0] for p in helpers.keras_modules()]


def test_a_test_sets_every_global_seed():
  random.seed(1)
  np.random.seed(1)
  tf.random.set_seed(1)
  for K in KERAS:
    K.utils.set_random_seed(2)
  assert context.global_seed() == 2


def test_the_next_test_finds_none_of_them():
  assert context.global_seed() is None
  draws = (random.random(), np.random.random())
  random.seed(2)
  np.random.seed(2)
  assert draws != (random.random(), np.random.random())
  global_state = __import__("sys").modules.get(
      "keras.src.backend.common.global_state")
  if global_state is not None:
    assert global_state.get_global_attribute("global_random_seed") is None
