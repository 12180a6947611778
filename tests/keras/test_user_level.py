"""privacy_unit="user": a record is one user's rows, whose gradient is the
sum of the user's example gradients, clipped as one (fast and vectorized
paths against a per-user Python loop)."""

import logging

import numpy as np
import pytest
import tensorflow as tf

import tf_dp
from tf_dp.errors import SamplingMismatchError
from tests.keras import helpers
from tests.keras.users import K_ROWS
from tests.keras.users import clipped_user_sum
from tests.keras.users import user_data
from tests.keras.users import user_layout

KERAS = helpers.keras_modules()
def _weights(model):
  return [np.asarray(v.numpy(), np.float64) for v in model.trainable_variables]


def user_optimizer(K, clip, n_users, method="auto", sampling="fixed_size",
                   **kwargs):
  if sampling == "poisson":
    kwargs.setdefault("sampling_probability", 0.5)
  return tf_dp.DPOptimizer(
      K.optimizers.SGD(1.0), l2_norm_clip=clip, noise_multiplier=0.0,
      population_size=n_users, sampling=sampling, privacy_unit="user",
      max_examples_per_user=K_ROWS, per_example_method=method, **kwargs)


def step_clipped_sum(K, model, x, y, w, clip, method, n_users=10):
  """The clipped sum one fixed-size user-level step applies (noise 0,
  SGD(1), denominator = the lot's users)."""
  model = tf_dp.keras.make_private(model)
  optimizer = user_optimizer(K, clip, n_users, method)
  before = _weights(model)
  loss = K.losses.SparseCategoricalCrossentropy(from_logits=True)
  tf.function(optimizer.private_step)(model, loss, tf.constant(x),
                                      tf.constant(y), tf.constant(w))
  users = len(x) // K_ROWS
  return [(b - a) * users for a, b in zip(_weights(model), before)], optimizer


@pytest.mark.filterwarnings("ignore:noise_multiplier=0")
@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("kind, method", [
    ("dense", "fast"), ("conv", "fast"), ("embedding", "fast"),
    ("dense", "vectorized")])
def test_each_users_summed_gradient_is_clipped_as_one(K, kind, method):
  # Against a per-user loop (float64 sums of float32 example gradients;
  # rtol 1e-4: float32 rounding of two computation orders). Clip 0.05
  # binds every user, 100 none: the user's record is the SUM of its
  # examples' gradients, not their mean, nor each example clipped alone.
  x, y, w = user_layout(kind, 4)
  for clip in (0.05, 100.0):
    model = helpers.build_model(K, kind)
    expected = clipped_user_sum(model, x, y, w, clip)
    got, optimizer = step_clipped_sum(K, model, x, y, w, clip, method)
    for a, b in zip(expected, got):
      np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)
  sample = optimizer.ledger.to_dict()["samples"][0]
  assert sample["privacy_unit"] == "user"
  assert (sample["population_size"], sample["examples_per_record"]) == (10, 1)
  assert sample["sampling_probability"] == pytest.approx(4 / 10)  # users


@pytest.mark.filterwarnings("ignore:noise_multiplier=0")
@pytest.mark.parametrize("K", KERAS)
def test_a_batch_that_does_not_divide_into_users_is_refused(K):
  x, y = helpers.make_data("dense", 7)
  model = tf_dp.keras.make_private(helpers.build_model(K, "dense"))
  optimizer = user_optimizer(K, 1.0, 10)
  loss = K.losses.SparseCategoricalCrossentropy(from_logits=True)
  with pytest.raises(ValueError, match="max_examples_per_user=3 consecutive "
                     "rows as one record.*Got a batch of 7 rows"):
    optimizer.private_step(model, loss, x, y)


def compiled(K, **kwargs):
  model = tf_dp.keras.make_private(helpers.build_model(K, "dense"))
  model.compile(optimizer=tf_dp.DPOptimizer(
      K.optimizers.SGD(0.1), l2_norm_clip=1.0, noise_multiplier=1.1,
      **kwargs), loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  return model


@pytest.mark.parametrize("K", KERAS)
def test_fit_on_user_lots_records_a_per_user_ledger(K, caplog):
  x, y, ids = user_data()
  # Lots of two batches (gradient accumulation): whole users per batch,
  # one ledger sample per lot.
  model = compiled(K, sampling="poisson", sampling_probability=0.5,
                   population_size=12, privacy_unit="user",
                   max_examples_per_user=K_ROWS,
                   gradient_accumulation_steps=2)
  lots = tf_dp.data.poisson_sampled_users(x, y, ids, 0.5, 4, K_ROWS,
                                          batches_per_lot=2)
  budget = tf_dp.keras.PrivacyBudget(delta=1e-5)
  with caplog.at_level(logging.INFO, logger="absl"):
    model.fit(lots, epochs=1, verbose=0, callbacks=[budget])
  assert f"(epsilon = {budget.epsilons[0]:.4g}, delta = 1e-05)-DP per user: " \
      "adding or removing (or, for fixed-size lots, replacing) one user (all " \
      "their examples)" in caplog.text
  data = model.optimizer.ledger.to_dict()
  assert len(data["samples"]) == 4
  assert {(s["privacy_unit"], s["population_size"], s["sampling"],
           s["sampling_probability"]) for s in data["samples"]} == {
               ("user", 12, "poisson", 0.5)}
  eps = tf_dp.analysis.compute_epsilon_from_ledger(model.optimizer.ledger,
                                                   1e-5)[0]
  # The accountant's epsilon at q over users, 4 lots (rel 1e-6: the
  # ledger holds the noise stddev of a float32 query, 1.1 to 3e-8).
  assert eps == pytest.approx(tf_dp.analysis.compute_dp_sgd_privacy(
      n=12, batch_size=6, noise_multiplier=1.1, epochs=2, delta=1e-5)[0],
                              rel=1e-6)


@pytest.mark.parametrize("K", KERAS)
def test_mixing_units_is_refused_before_any_step(K):
  x, y, ids = user_data()
  user_kwargs = dict(sampling="poisson", sampling_probability=0.5,
                     population_size=12, privacy_unit="user",
                     max_examples_per_user=K_ROWS)
  cases = [
      (user_kwargs, tf_dp.data.poisson_sampled_batches(x, y, 0.5, 2),
       r"privacy_unit='user'\) clips each user's rows.*lots drawn over "
       r"examples.*poisson_sampled_users"),
      (dict(user_kwargs, max_examples_per_user=2),
       tf_dp.data.poisson_sampled_users(x, y, ids, 0.5, 2, K_ROWS),
       r"max_examples_per_user=3 rows per user, but DPOptimizer\("
       r"max_examples_per_user=2\)"),
      (user_kwargs, (x, y), r"declares lots drawn by "
       r"tf_dp.data.poisson_sampled_users.*Keras cannot draw users"),
      (dict(sampling="poisson", sampling_probability=0.5, population_size=12),
       tf_dp.data.poisson_sampled_users(x, y, ids, 0.5, 2, K_ROWS),
       r"lots drawn over users.*privacy_unit is 'example'.*Pass "
       r"DPOptimizer\(..., privacy_unit='user', max_examples_per_user=3"),
  ]
  for kwargs, data, match in cases:
    model = compiled(K, **kwargs)
    before = _weights(model)
    fit_args = data if isinstance(data, tuple) else (data,)
    with pytest.raises(SamplingMismatchError, match=match):
      model.fit(*fit_args, epochs=1, verbose=0)
    for a, b in zip(before, _weights(model)):
      np.testing.assert_array_equal(a, b)
    assert model.optimizer.ledger.to_dict()["samples"] == []


@pytest.mark.filterwarnings("ignore:noise_multiplier=0")
@pytest.mark.parametrize("K", KERAS)
def test_a_user_level_optimizer_keeps_its_unit_through_its_config(K):
  optimizer = user_optimizer(K, 1.0, 10)
  again = type(optimizer).from_config(optimizer.get_config())
  assert again.dp_config.privacy_unit == "user"
  assert again.dp_config.max_examples_per_user == K_ROWS
  assert again.dp_config == optimizer.dp_config


@pytest.mark.parametrize("K", KERAS)
def test_a_saved_user_level_model_loads_with_its_per_user_ledger(K, tmp_path):
  x, y, ids = user_data()
  model = compiled(K, sampling="poisson", sampling_probability=0.5,
                   population_size=12, privacy_unit="user",
                   max_examples_per_user=K_ROWS)
  model.fit(tf_dp.data.poisson_sampled_users(x, y, ids, 0.5, 2, K_ROWS),
            verbose=0)
  path = str(tmp_path / "m.keras")
  model.save(path)
  loaded = tf_dp.keras.make_private(K.models.load_model(path))
  assert loaded.optimizer.ledger.privacy_unit == "user"
  assert loaded.optimizer.ledger.to_dict() == model.optimizer.ledger.to_dict()
  assert loaded.optimizer.dp_config.max_examples_per_user == K_ROWS
  loaded.fit(tf_dp.data.poisson_sampled_users(x, y, ids, 0.5, 2, K_ROWS),
             verbose=0)
  samples = loaded.optimizer.ledger.to_dict()["samples"]
  assert len(samples) == 4 and {s["privacy_unit"] for s in samples} == {"user"}


@pytest.mark.filterwarnings("ignore:noise_multiplier=0")
@pytest.mark.parametrize("K", KERAS)
def test_user_batches_a_strategy_would_split_are_refused(K):
  """Under a strategy of R replicas each replica takes a part of
  consecutive rows of the batch: whole users only when the batch holds a
  multiple of R users (tests/distribute trains both cases on 2 replicas).
  The check, for Poisson lots with accumulation and fixed-size lots."""
  from tf_dp.keras import fit_sampling  # pylint: disable=g-import-not-at-top
  x, y, ids = user_data()
  poisson = user_optimizer(K, 1.0, 12, sampling="poisson",
                           gradient_accumulation_steps=2).dp_config
  fixed = user_optimizer(K, 1.0, 12).dp_config
  sampled = lambda users: tf_dp.data.poisson_sampled_users(
      x, y, ids, 0.5, 2, K_ROWS, max_users_per_lot=users, batches_per_lot=2)
  fixed_lots = lambda users: tf_dp.data.fixed_size_sampled_users(
      x, y, ids, users, 2, K_ROWS)
  # Whole users per replica: 8 users in 2 batches of 4 on 2 replicas;
  # 6 fixed-size users on 2 or 3 replicas.
  for config, data, replicas in ((poisson, sampled(8), 2),
                                 (fixed, fixed_lots(6), 2),
                                 (fixed, fixed_lots(6), 3)):
    fit_sampling.check_sampling_of_fit_input(config, data, 12,
                                             replicas=replicas)
  # Batches of 3 users (Poisson: ceil(6 / 2)) split a user on 2 replicas.
  for config, data in ((poisson, sampled(6)), (fixed, fixed_lots(3))):
    with pytest.raises(SamplingMismatchError,
                       match=r"strategy of 2 replicas.*batches of 9 rows "
                       r"\(3 users of max_examples_per_user=3 rows\).*a "
                       r"multiple of 2 users"):
      fit_sampling.check_sampling_of_fit_input(config, data, 12, replicas=2)
  # A batch of unknown size cannot be shown to split.
  unknown = tf_dp.data.declare_sampling(
      tf.data.Dataset.from_tensor_slices((x, y)).batch(
          2 * K_ROWS, drop_remainder=False), "fixed_size",
      privacy_unit="user", max_examples_per_user=K_ROWS)
  with pytest.raises(SamplingMismatchError, match="of unknown size"):
    fit_sampling.check_sampling_of_fit_input(fixed, unknown, 12, replicas=2)
  fit_sampling.check_sampling_of_fit_input(fixed, unknown, 12, replicas=1)
