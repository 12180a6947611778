"""The user-level promise (privacy_unit="user"), with real fits.

One lot is trained, noise 0 and SGD(learning_rate=1), on D and on D' (one
user and all their examples removed from a Poisson lot, or replaced in a
fixed-size lot), from the same weights; the update times the lot's
denominator is the change of the clipped sum. User-level clipping bounds it
by C (removal) or 2C (replacement) whatever the user's examples; the same
lot clipped per example lets a user with k examples move it by k C: a
crafted user (k copies of one example, whose clipped gradients add up)
moves it by k C to float rounding.
"""

import warnings

import numpy as np
import pytest
import tensorflow as tf

import tf_dp
from tests.keras import helpers

KERAS = helpers.keras_modules()
K_ROWS = 4    # max_examples_per_user, and the crafted user's examples.
USERS = 5     # users in the lot (blocks of K_ROWS rows).
N_USERS = 50  # population: Poisson q = USERS / N_USERS, denominator q n.
CLIP = 0.01   # binds every user and every example.


def lot(seed=0, crafted=2):
  """A lot of USERS blocks; user u has 1 + u % K_ROWS examples, except user
  ``crafted``, who holds K_ROWS copies of one example."""
  x, y = helpers.make_data("dense", USERS * K_ROWS, seed=seed)
  w = np.zeros(USERS * K_ROWS, np.float32)
  for u in range(USERS):
    size = K_ROWS if u == crafted else 1 + u % K_ROWS
    w[u * K_ROWS:u * K_ROWS + size] = 1.0
  block = slice(crafted * K_ROWS, (crafted + 1) * K_ROWS)
  x[block], y[block] = x[crafted * K_ROWS], y[crafted * K_ROWS]
  x[w == 0], y[w == 0] = 0.0, 0
  return x, y, w


def without_user(x, y, w, u):
  """The lot with user ``u``'s block turned into padding (removed)."""
  x, y, w = x.copy(), y.copy(), w.copy()
  rows = slice(u * K_ROWS, (u + 1) * K_ROWS)
  x[rows], y[rows], w[rows] = 0.0, 0, 0.0
  return x, y, w


def one_lot_runner(K, initial, unit, sampling, method):
  """``run(x, y, w)``: the clipped sum of one lot, the update of a
  noise-free SGD(1) ``fit`` from ``initial`` times the lot's denominator.
  One compiled model serves every lot (its weights reset before each
  fit), so the DP step is traced once."""
  model = tf_dp.keras.make_private(helpers.build_model(K, "dense"))
  user = dict(privacy_unit="user", max_examples_per_user=K_ROWS)
  population = N_USERS if unit == "user" else N_USERS * K_ROWS
  kwargs = dict(sampling=sampling, population_size=population,
                per_example_method=method, **(user if unit == "user" else {}))
  rows = USERS * K_ROWS
  if sampling == "poisson":
    kwargs["sampling_probability"] = (USERS / N_USERS if unit == "user"
                                      else rows / population)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)  # noise_multiplier=0.
    optimizer = tf_dp.DPOptimizer(K.optimizers.SGD(1.0), l2_norm_clip=CLIP,
                                  noise_multiplier=0.0, **kwargs)
  model.compile(optimizer=optimizer,
                loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))

  def run(x, y, w):
    model.set_weights(initial)
    lots_before = len(model.optimizer.ledger.to_dict()["samples"])
    ds = tf.data.Dataset.from_tensor_slices((x, y, w)).batch(len(x))
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", UserWarning)  # Keras: shuffle=True.
      model.fit(tf_dp.data.declare_sampling(
          ds, sampling, kwargs.get("sampling_probability"),
          **(user if unit == "user" else {})), epochs=1, verbose=0)
    after = model.get_weights()
    if sampling == "poisson":  # q n: USERS (per user) or the rows.
      denominator = USERS if unit == "user" else rows
    else:
      denominator = USERS if unit == "user" else int(np.sum(w > 0))
    samples = model.optimizer.ledger.to_dict()["samples"]
    assert len(samples) == lots_before + 1
    assert samples[-1].get("privacy_unit", "example") == unit
    return np.concatenate([(a - b).ravel() for a, b in zip(initial, after)
                           ]) * denominator

  return run


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("method", ["fast", "vectorized"])
def test_removing_a_user_moves_the_clipped_sum_by_at_most_c(K, method):
  x, y, w = lot()
  initial = helpers.build_model(K, "dense").get_weights()
  run = one_lot_runner(K, initial, "user", "poisson", method)
  full = run(x, y, w)
  for u in range(USERS):
    change = np.linalg.norm(full - run(*without_user(x, y, w, u)))
    # rtol 1e-4: float32 sums of a few clipped gradients.
    assert change <= CLIP * (1 + 1e-4), (u, change)
    if u == 2:  # The crafted user: its one clipped gradient, exactly C.
      assert change == pytest.approx(CLIP, rel=1e-4)
  # Example-level clipping of the same lot: the crafted user's K_ROWS
  # copies each add a clipped gradient of norm C in one direction.
  run = one_lot_runner(K, initial, "example", "poisson", method)
  per_example = np.linalg.norm(run(x, y, w) - run(*without_user(x, y, w, 2)))
  assert per_example == pytest.approx(K_ROWS * CLIP, rel=1e-4)


@pytest.mark.parametrize("K", KERAS)
def test_replacing_a_user_moves_a_fixed_size_lot_by_at_most_2c(K):
  x, y, w = lot()
  initial = helpers.build_model(K, "dense").get_weights()
  x2, y2, w2 = lot(seed=7, crafted=0)
  rows = slice(2 * K_ROWS, 3 * K_ROWS)  # user 2 replaced by another user
  xn, yn, wn = x.copy(), y.copy(), w.copy()
  xn[rows], yn[rows], wn[rows] = x2[:K_ROWS], y2[:K_ROWS], w2[:K_ROWS]
  run = one_lot_runner(K, initial, "user", "fixed_size", "fast")
  change = np.linalg.norm(run(x, y, w) - run(xn, yn, wn))
  assert 0 < change <= 2 * CLIP * (1 + 1e-4)
