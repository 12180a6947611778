"""A fixed order is never recorded as random (``tf_dp.keras.fit_order``).

Under ``sampling="shuffled"`` the ledger records each batch as a random
sample (q = B / n). ``fit`` refuses, before any step, an order tf_dp can
see is fixed (arrays with ``shuffle=False`` or ``shuffle="batch"``, a
pipeline without a shuffle of the rows) or cannot read (a generator);
declared with ``sampling="fixed_order"``, the same order trains and is
accounted as passes without amplification.
"""

import numpy as np
import pytest
import tensorflow as tf

import tf_dp
from tests.keras import helpers
from tf_dp.core import config
from tf_dp.analysis import fixed_order

KERAS = helpers.keras_modules()
N, BATCH, SIGMA = 40, 10, 4.0
FIXES = ("shuffle=True", ".shuffle(n).batch(B)", "poisson_sampled_batches",
         'sampling="fixed_order"', "noise_strategy")


def _private(K, sampling, **kwargs):
  model = tf_dp.keras.make_private(helpers.build_model(K, "dense"))
  model.compile(optimizer=tf_dp.DPOptimizer(
      K.optimizers.SGD(0.5), l2_norm_clip=1.0, noise_multiplier=SIGMA,
      sampling=sampling, **kwargs),
                loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  return model


def _epsilon(model):
  return tf_dp.analysis.compute_epsilon_from_ledger(model.optimizer.ledger,
                                                    1e-5)[0]


def _assert_refused_before_any_step(model, fit, *said):
  before = helpers.weights(model)
  with pytest.raises(tf_dp.errors.SamplingMismatchError) as refusal:
    fit()
  for text in said + FIXES:
    assert text in str(refusal.value), str(refusal.value)
  for a, b in zip(before, helpers.weights(model)):
    np.testing.assert_array_equal(a, b)
  assert int(model.optimizer.ledger.sample_count.numpy()) == 0


def _generator(x, y):
  for i in range(0, len(x), BATCH):
    yield x[i:i + BATCH], y[i:i + BATCH]


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("shuffle", [False, "batch"])
def test_arrays_in_a_fixed_order_are_refused_under_shuffled_sampling(
    K, shuffle):
  """shuffle=False, and shuffle="batch" (Keras 3 keeps the batches' order;
  Keras 2 shuffles the order of fixed blocks): each example is always in
  the same batch. Failed before: fit trained with a warning."""
  x, y = helpers.make_data("dense", N)
  model = _private(K, "shuffled")
  _assert_refused_before_any_step(
      model, lambda: model.fit(x, y, batch_size=BATCH, shuffle=shuffle,
                               verbose=0),
      f"shuffle={shuffle!r}".replace("'", '"'))


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("given", ["in order", "shuffled after batching",
                                   "small buffer", "generator"])
def test_inputs_not_shown_random_are_refused_under_shuffled_sampling(
    K, given):
  """A pipeline from_tensor_slices(...).batch(B) passed with no warning
  (failed before: ledger epsilon 0.209 where the order gives 1.993, n 1000,
  B 10, sigma 4, one epoch; test_fixed_order_costs_a_gaussian_per_pass);
  so did one shuffled after batching or with a small buffer, and a
  generator, which tf_dp cannot read."""
  x, y = helpers.make_data("dense", N)
  rows = tf.data.Dataset.from_tensor_slices((x, y))
  fit_kw, said = {
      "in order": (dict(x=rows.batch(BATCH)), "in the order they come"),
      "shuffled after batching": (dict(x=rows.batch(BATCH).shuffle(4)),
                                  "after the batching"),
      "small buffer": (dict(x=rows.shuffle(N // 2).batch(BATCH)),
                       f"holds {N // 2} of the n = {N}"),
      "generator": (dict(x=_generator(x, y), steps_per_epoch=N // BATCH),
                    "fit was given a generator"),
  }[given]
  model = _private(K, "shuffled", population_size=N)
  _assert_refused_before_any_step(
      model, lambda: model.fit(epochs=1, verbose=0, **fit_kw), said)


@pytest.mark.parametrize("K", KERAS)
def test_a_full_shuffle_before_batching_trains_under_shuffled_sampling(K):
  x, y = helpers.make_data("dense", N)
  model = _private(K, "shuffled", population_size=N)
  model.fit(tf.data.Dataset.from_tensor_slices((x, y)).shuffle(N).batch(
      BATCH), epochs=1, verbose=0)
  assert len(helpers.ledger_samples(model)) == N // BATCH


@pytest.mark.parametrize("K", KERAS)
def test_a_seeded_shuffle_trains_with_a_warning(K):
  x, y = helpers.make_data("dense", N)
  model = _private(K, "shuffled", population_size=N)
  with pytest.warns(UserWarning, match="shuffled with fixed seeds"):
    model.fit(tf.data.Dataset.from_tensor_slices((x, y)).shuffle(
        N, seed=5).batch(BATCH), epochs=1, verbose=0)
  assert len(helpers.ledger_samples(model)) == N // BATCH


@pytest.mark.parametrize("K", KERAS)
def test_fixed_order_costs_a_gaussian_per_pass(K):
  """The figures of the fixed order: n = 1000, B = 10, sigma = 4, one
  epoch in order, declared: the ledger gives the Gaussian mechanism's
  1.993 (mu = 2 / sigma), not the 0.209 of q = B / n."""
  n = 1000
  x, y = helpers.make_data("dense", n)
  model = _private(K, "fixed_order")
  model.fit(x, y, batch_size=BATCH, shuffle=False, epochs=1, verbose=0)
  samples = helpers.ledger_samples(model)
  assert len(samples) == n // BATCH
  assert {s["sampling"] for s in samples} == {"fixed_order"}
  assert _epsilon(model) == pytest.approx(1.9931, abs=1e-4)
  assert _epsilon(model) == pytest.approx(
      fixed_order.fixed_order_epsilon(SIGMA, 1, 1e-5), rel=1e-12)


@pytest.mark.parametrize("K", KERAS)
def test_a_declared_pipeline_in_order_trains_one_pass_per_epoch(K):
  """An epoch of 25 rows (n = 40): each epoch restarts the order, so its
  pass is closed at the epoch's end by a lot that released nothing, and
  two epochs are two passes, not 50 / 40 of one."""
  x, y = helpers.make_data("dense", N)
  model = _private(K, "fixed_order", population_size=N)
  data = tf.data.Dataset.from_tensor_slices((x, y)).take(25).batch(BATCH)
  model.fit(data, epochs=2, verbose=0)
  samples = helpers.ledger_samples(model)
  closing = [s for s in samples if not s["sum_queries"]]
  assert len(samples) == 8 and len(closing) == 2
  assert closing[0]["sampling_probability"] == pytest.approx(15 / N)
  assert _epsilon(model) == pytest.approx(
      fixed_order.fixed_order_epsilon(SIGMA, 2, 1e-5), rel=1e-12)


@pytest.mark.parametrize("K", KERAS)
def test_a_fit_stopped_inside_a_pass_leaves_a_whole_pass(K):
  """A fit stopped after one of its 4 lots, then a full fit: the example
  of the first batch took part twice; the second fit starts by closing the
  first's pass, so the ledger counts two passes."""
  x, y = helpers.make_data("dense", N)
  model = _private(K, "fixed_order")
  stop = (K.callbacks.LambdaCallback(
      on_train_batch_end=lambda batch, logs: setattr(
          model, "stop_training", True)))
  model.fit(x, y, batch_size=BATCH, shuffle=False, epochs=1, verbose=0,
            callbacks=[stop])
  model.fit(x, y, batch_size=BATCH, shuffle=False, epochs=1, verbose=0)
  samples = helpers.ledger_samples(model)
  released = [s for s in samples if s["sum_queries"]]
  assert len(released) == 1 + N // BATCH
  assert _epsilon(model) == pytest.approx(
      fixed_order.fixed_order_epsilon(SIGMA, 2, 1e-5), rel=1e-12)
  assert _epsilon(model) > fixed_order.fixed_order_epsilon(SIGMA, 1, 1e-5)


@pytest.mark.parametrize("K", KERAS)
def test_the_budget_stops_a_fixed_order_at_the_passes_it_allows(K):
  """PrivacyBudget plans a fixed order by passes: a target between the
  epsilon of two and of three passes stops after two epochs' lots."""
  x, y = helpers.make_data("dense", N)
  model = _private(K, "fixed_order")
  two = fixed_order.fixed_order_epsilon(SIGMA, 2, 1e-5)
  three = fixed_order.fixed_order_epsilon(SIGMA, 3, 1e-5)
  budget = tf_dp.keras.PrivacyBudget(1e-5, target_epsilon=(two + three) / 2)
  model.fit(x, y, batch_size=BATCH, shuffle=False, epochs=5, verbose=0,
            callbacks=[budget])
  released = [s for s in helpers.ledger_samples(model) if s["sum_queries"]]
  assert len(released) == 2 * N // BATCH
  assert _epsilon(model) == pytest.approx(two, rel=1e-12)


def test_user_level_lots_cannot_be_declared_in_a_fixed_order():
  with pytest.raises(tf_dp.errors.SamplingMismatchError,
                     match="ordered batches of examples do not sample users"):
    config.DPConfig(1.0, 1.0, population_size=10,
                    sampling="fixed_order", privacy_unit="user",
                    max_examples_per_user=2)
