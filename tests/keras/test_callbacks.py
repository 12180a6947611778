"""Tests of the PrivacyBudget callback: epsilon logged each epoch (and seen
by the CSV and TensorBoard loggers), training stopped before the target is
exceeded, and lots never larger than planned."""

import csv
import warnings

import numpy as np
import pytest
import tensorflow as tf

import tf_dp
from tf_dp.core import lot
from tests.keras import helpers
from tests.keras import users


KERAS = helpers.keras_modules()


def dense_model(K, n, **kwargs):
  return helpers.compile_dp(K, helpers.build_model(K, "dense"), n, **kwargs)


@pytest.mark.parametrize("K", KERAS)
def test_budget_logs_epsilon_each_epoch(K):
  x, y = helpers.make_data("dense", 64)
  model = dense_model(K, 64, l2_norm_clip=1.0, noise_multiplier=2.0)
  budget = tf_dp.keras.PrivacyBudget(delta=1e-5)
  history = model.fit(x, y, batch_size=16, epochs=3, verbose=0,
                      callbacks=[budget])
  eps = history.history["epsilon"]
  assert len(eps) == 3 and eps[0] < eps[1] < eps[2]
  for epoch, value in enumerate(eps, start=1):
    expected, _ = tf_dp.analysis.compute_dp_sgd_privacy(
        64, 16, 2.0, epoch, 1e-5, sampling="fixed_size")
    assert value == pytest.approx(expected, rel=1e-5)


def _shuffled_warnings(calls):
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")  # Python's own once-per-line filter off.
    for call in calls:
      call()
  return len([w for w in caught if "'shuffled' sampling" in str(w.message)])


@pytest.mark.parametrize("K", KERAS)
def test_the_shuffled_sampling_warning_is_said_once_per_run(K):
  """Tutorial 1 printed it three times for one fit (the budget's plan, the
  epoch's epsilon, the user's own epsilon; with every call shown, 5 times
  here): once per run, i.e. per ledger, now (another ledger warns again:
  tests/analysis/test_ledger.py)."""
  x, y = helpers.make_data("dense", 64)
  model = dense_model(K, 64, l2_norm_clip=1.0, noise_multiplier=2.0)
  fit = lambda: model.fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=[
      tf_dp.keras.PrivacyBudget(delta=1e-5, target_epsilon=100.0)])
  epsilon = lambda: tf_dp.analysis.compute_epsilon_from_ledger(
      model.optimizer.ledger, 1e-5)
  assert _shuffled_warnings([fit, epsilon]) == 1


def _tensorboard_scalars(logdir, tag):
  """The values of scalar ``tag`` in TensorBoard's event files under
  ``logdir``, in step order."""
  values = {}
  for path in tf.io.gfile.glob(f"{logdir}/**/events.out.tfevents.*"):
    for record in tf.data.TFRecordDataset(path):
      event = tf.compat.v1.Event.FromString(record.numpy())
      for value in event.summary.value:
        if value.tag == tag:
          values[event.step] = float(
              tf.make_ndarray(value.tensor) if value.HasField("tensor")
              else value.simple_value)
  return [values[step] for step in sorted(values)]


def _csv_column(path, name):
  with open(path, newline="") as f:
    return [float(row[name]) for row in csv.DictReader(f)]


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("logger", ["csv", "tensorboard"])
@pytest.mark.parametrize("budget_first", [True, False])
def test_epsilon_reaches_the_loggers_whatever_the_order(K, logger,
                                                        budget_first,
                                                        tmp_path):
  # TensorBoard and CSVLogger read the epoch's logs in their own
  # on_epoch_end: epsilon must be in them whatever the callbacks' order.
  if logger == "tensorboard":
    pytest.importorskip("tensorboard")
    writer = K.callbacks.TensorBoard(str(tmp_path), write_graph=False,
                                     profile_batch=0)
  else:
    writer = K.callbacks.CSVLogger(str(tmp_path / "log.csv"))
  x, y = helpers.make_data("dense", 64)
  model = dense_model(K, 64, l2_norm_clip=1.0, noise_multiplier=2.0)
  budget = tf_dp.keras.PrivacyBudget(delta=1e-5)
  callbacks = [budget, writer] if budget_first else [writer, budget]
  model.fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=callbacks)
  logged = (_tensorboard_scalars(str(tmp_path), "epoch_epsilon")
            if logger == "tensorboard"
            else _csv_column(tmp_path / "log.csv", "epsilon"))
  assert logged == pytest.approx(budget.epsilons, rel=1e-6)
  assert len(logged) == 2 and logged[0] < logged[1]


@pytest.mark.parametrize("K", KERAS)
def test_budget_stops_before_target_is_exceeded(K, capsys):
  x, y = helpers.make_data("dense", 64)
  model = dense_model(K, 64, l2_norm_clip=1.0, noise_multiplier=2.0)
  target = 10.0  # one lot costs 2.71 here (fixed-size sampling, q = 1/4).
  budget = tf_dp.keras.PrivacyBudget(delta=1e-5, target_epsilon=target)
  model.fit(x, y, batch_size=16, epochs=50, verbose=0, callbacks=[budget])
  lots = len(model.optimizer.ledger.to_dict()["samples"])
  eps = budget.epsilon()
  assert eps <= target and not budget.exceeded
  # It says so on standard output, with verbose=0 too: a stop is no log.
  printed = capsys.readouterr().out
  assert (f"PrivacyBudget stopped training after {lots} lots: the next lot "
          f"would take epsilon past target_epsilon=10") in printed, printed
  assert f"(epsilon = {eps:.4g}, delta = 1e-05)-DP per example" in printed
  assert ".." not in printed   # one sentence, one full stop
  # One more lot would have exceeded the target.
  more, _ = tf_dp.analysis.compute_dp_sgd_privacy(
      64, 16, 2.0, (lots + 1) * 16 / 64, 1e-5, sampling="fixed_size")
  assert more > target
  assert 1 < lots < 50 * 4


@pytest.mark.parametrize("K", KERAS)
def test_budget_refuses_a_first_lot_that_already_exceeds(K):
  """One lot of 16 of 64 with noise 2 costs 2.71 (PLD; 3.27 by RDP), more
  than a target of 2.5: known from the optimizer and fit's arrays before
  any step, so nothing is released and the error says what to change."""
  x, y = helpers.make_data("dense", 64)
  model = dense_model(K, 64, l2_norm_clip=1.0, noise_multiplier=2.0)
  before = helpers.weights(model)
  budget = tf_dp.keras.PrivacyBudget(delta=1e-5, target_epsilon=2.5)
  with pytest.raises(tf_dp.errors.PrivacyError,
                     match=r"target_epsilon=2.5.*2\.71.*noise_multiplier"):
    model.fit(x, y, batch_size=16, epochs=5, verbose=0, callbacks=[budget])
  assert not model.optimizer.ledger.to_dict()["samples"]
  for a, b in zip(before, helpers.weights(model)):
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("K", KERAS)
def test_budget_plans_the_first_lots_before_any_step(K):
  """q = 50/1000, noise 2: one lot costs 1.033 by PLD (fixed-size), two
  1.187, more than a target of 1.1. Planned from the optimizer before the first
  step, the fit stops after that one lot within the target; a custom
  query, whose noise is known only from its first lot, still releases
  one lot and reports that it exceeded the target."""
  x, y = helpers.make_data("dense", 1000)
  model = dense_model(K, 1000, l2_norm_clip=1.0, noise_multiplier=2.0)
  one, _ = tf_dp.analysis.compute_dp_sgd_privacy(
      1000, 50, 2.0, 50 / 1000, 1e-5, sampling="fixed_size")
  two, _ = tf_dp.analysis.compute_dp_sgd_privacy(
      1000, 50, 2.0, 100 / 1000, 1e-5, sampling="fixed_size")
  assert one < 1.1 < two
  budget = tf_dp.keras.PrivacyBudget(delta=1e-5, target_epsilon=1.1)
  model.fit(x, y, batch_size=50, epochs=2, verbose=0, callbacks=[budget])
  assert len(model.optimizer.ledger.to_dict()["samples"]) == 1
  assert budget.epsilon() == pytest.approx(one, rel=1e-6)
  assert not budget.exceeded
  model = helpers.build_model(K, "dense")
  model = tf_dp.keras.make_private(model)
  model.compile(optimizer=tf_dp.DPOptimizer(
      K.optimizers.SGD(0.1), dp_query=tf_dp.dp_query.GaussianSumQuery(1.0, 2.0),
      population_size=64),
                loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  budget = tf_dp.keras.PrivacyBudget(delta=1e-5, target_epsilon=2.5)
  with pytest.warns(UserWarning, match="exceeded target_epsilon=2.5"):
    model.fit(x[:64], y[:64], batch_size=16, epochs=5, verbose=0,
              callbacks=[budget])
  assert budget.exceeded
  assert len(model.optimizer.ledger.to_dict()["samples"]) == 1


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("steps_per_execution", [1, 3])
def test_budget_plans_with_the_largest_lot_not_the_last(K,
                                                        steps_per_execution):
  """n = 1001, batches of 100: each epoch ends with a lot of one example
  (q = 1/1001). Planning the lots left as lots of that size let a whole
  epoch of full lots through (final epsilon 16.09 for a target of 13.4);
  the plan must use the full lot, q = 100/1001."""
  x, y = helpers.make_data("dense", 1001)
  model = helpers.build_model(K, "dense")
  model = tf_dp.keras.make_private(model)
  model.compile(optimizer=tf_dp.DPOptimizer(
      K.optimizers.SGD(0.1), l2_norm_clip=1.0, noise_multiplier=1.0,
      population_size=1001),
                loss=K.losses.SparseCategoricalCrossentropy(from_logits=True),
                steps_per_execution=steps_per_execution)
  target = 13.4
  budget = tf_dp.keras.PrivacyBudget(delta=1e-5, target_epsilon=target)
  model.fit(x, y, batch_size=100, epochs=20, verbose=0, callbacks=[budget])
  assert budget.epsilon() <= target and not budget.exceeded
  samples = model.optimizer.ledger.to_dict()["samples"]
  # The budget was used: a full lot more would have exceeded it.
  qs = [s["sampling_probability"] for s in samples]
  runs = [(tf_dp.analysis.ledger.LedgerEvent(
      "shuffled", q, 1.0, 1001, 1), 1) for q in qs + [100 / 1001]]
  more, _ = tf_dp.analysis.event_accounting.epsilon_of_runs(runs, 1e-5)
  assert more > target


@pytest.mark.parametrize("K", KERAS)
def test_budget_never_releases_a_lot_larger_than_it_planned(K):
  """A dataset whose first lot holds one example and the next ones 100:
  the plan, made with lots of one example, must not pay for lots of 100.
  The larger lot is dropped (nothing released, no weight changed) and
  training stops with a warning."""
  x, y = helpers.make_data("dense", 1001)
  data = tf.data.Dataset.from_tensor_slices((x, y))
  # Declared fixed-size lots (as a sampler's): the pipeline's sizes are
  # what the test is about, not its order.
  data = tf_dp.data.declare_sampling(
      data.take(1).batch(1).concatenate(data.skip(1).batch(100)),
      "fixed_size")
  model = helpers.build_model(K, "dense")
  model = tf_dp.keras.make_private(model)
  model.compile(optimizer=tf_dp.DPOptimizer(
      K.optimizers.SGD(0.1), l2_norm_clip=1.0, noise_multiplier=1.0,
      population_size=1001, sampling="fixed_size"),
                loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  target = 5.0  # one epoch of full lots costs more
  budget = tf_dp.keras.PrivacyBudget(delta=1e-5, target_epsilon=target)
  weights = []
  record = K.callbacks.LambdaCallback(
      on_train_batch_end=lambda batch, logs: weights.append(
          model.get_weights()))
  with pytest.warns(UserWarning, match="PrivacyBudget stopped training"):
    model.fit(data, epochs=3, verbose=0, callbacks=[budget, record])
  assert budget.epsilon() <= target
  samples = model.optimizer.ledger.to_dict()["samples"]
  assert [s["sampling_probability"] for s in samples] == [
      pytest.approx(1 / 1001)]
  assert len(weights) == 2  # the dropped lot changed no weight
  for a, b in zip(*weights):
    np.testing.assert_array_equal(a, b)


def _user_lots(K):
  """A user-level Poisson model and its lots (q = 0.5 of 12 users)."""
  x, y, ids = users.user_data()
  model = helpers.compile_dp(
      K, helpers.build_model(K, "dense"), 12, noise_multiplier=1.1,
      sampling="poisson", sampling_probability=0.5, privacy_unit="user",
      max_examples_per_user=users.K_ROWS)
  return model, tf_dp.data.poisson_sampled_users(x, y, ids, 0.5, 2,
                                                 users.K_ROWS, seed=1)


def _first_lots(K, lots):
  """``(model, data, fit kwargs)`` whose first lot PrivacyBudget plans."""
  x, y = helpers.make_data("dense", 64)
  if lots == "user_poisson":
    model, data = _user_lots(K)
    return model, data, {}
  if lots == "poisson":
    model = dense_model(K, 64, noise_multiplier=1.3, sampling="poisson",
                        sampling_probability=0.25)
    return model, tf_dp.data.poisson_sampled_batches(x, y, 0.25, 2,
                                                     seed=1), {}
  accumulation = 2 if lots == "shuffled_accumulated" else 1
  model = dense_model(K, 64, noise_multiplier=1.3,
                      gradient_accumulation_steps=accumulation)
  return model, (x, y), dict(batch_size=16)


def _assert_same_sampling(planned, recorded):
  """A planned lot's sampling (q, n, examples per record, unit) is the one
  the ledger recorded."""
  assert (planned.sampling, planned.population_size,
          planned.examples_per_record, planned.privacy_unit) == (
              recorded.sampling, recorded.population_size,
              recorded.examples_per_record, recorded.privacy_unit)
  assert planned.sampling_probability == pytest.approx(
      recorded.sampling_probability, rel=1e-12)


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize(
    "lots", ["poisson", "user_poisson", "shuffled", "shuffled_accumulated"])
def test_the_planned_first_lot_is_the_lot_fit_records(K, lots):
  """PrivacyBudget plans the first lot before any step from the optimizer
  and fit's arrays; the ledger then records what the step did. The two
  must be one event, field by field (the plan's noise multiplier a hair
  lower: the ledger holds the query's float32 stddev)."""
  model, data, kwargs = _first_lots(K, lots)
  budget = tf_dp.keras.PrivacyBudget(delta=1e-5)
  planned = []
  plan = K.callbacks.LambdaCallback(on_train_begin=lambda logs: planned.append(
      budget._first_lot()))  # pylint: disable=protected-access
  args = data if isinstance(data, tuple) else (data,)
  model.fit(*args, epochs=1, verbose=0, callbacks=[budget, plan], **kwargs)
  assert planned[0] is not None
  event, examples = planned[0]
  recorded = tf_dp.analysis.ledger.ledger_events(model.optimizer.ledger)[0]
  _assert_same_sampling(event, recorded)
  # Never undercounts: at most the recorded multiplier, within float32.
  assert event.noise_multiplier <= recorded.noise_multiplier
  assert event.noise_multiplier == pytest.approx(recorded.noise_multiplier,
                                                 rel=1e-5)
  expected = {"shuffled": 16, "shuffled_accumulated": 32}.get(lots)
  assert examples == expected


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("lots", ["fixed_size_microbatches", "shuffled"])
def test_the_sampling_rule_on_numbers_is_the_event_the_step_records(K, lots):
  """The rule PrivacyBudget plans with (``lot_sampling_event`` on Python
  numbers) gives the event fit's step records, for the lots the plan
  cannot foresee too: microbatches (a record holds examples / records
  examples) and the short last lot of a pass (q = its examples / n)."""
  x, y = helpers.make_data("dense", 40)
  if lots == "fixed_size_microbatches":
    model = dense_model(K, 40, sampling="fixed_size", num_microbatches=4)
    model.fit(tf_dp.data.fixed_size_sampled_batches(x, y, 16, 2, seed=1),
              epochs=1, verbose=0)
    counts = [(4, 16), (4, 16)]  # (records, examples) of each lot
  else:
    model = dense_model(K, 40)
    model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    counts = [(16, 16), (16, 16), (8, 8)]
  config = model.optimizer.dp_engine.config
  recorded = tf_dp.analysis.ledger.ledger_events(model.optimizer.ledger)
  assert len(recorded) == len(counts)
  for (records, examples), event in zip(counts, recorded):
    rule = lot.lot_sampling_event(config, 40, records, examples)
    _assert_same_sampling(rule, event)
  assert recorded[0].examples_per_record == (
      4 if lots == "fixed_size_microbatches" else 1)
