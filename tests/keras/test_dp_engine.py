"""Tests of the DP engine's private training metrics: DPMetricsQuery in
the step (``dp_accuracy``), accounted in the same ledger sample as the
gradient. The query alone: tests/dp_query/test_metrics_query.py."""

import math

import numpy as np
import pytest

import tf_dp
from tests.keras import helpers


KERAS = helpers.keras_modules()


@pytest.mark.parametrize("K", KERAS)
def test_dp_accuracy_without_noise_equals_accuracy(K):
  x, y = helpers.make_data("dense", 32)
  model = tf_dp.keras.make_private(helpers.build_model(K, "dense"))
  model.compile(optimizer=tf_dp.DPOptimizer(
      K.optimizers.SGD(0.0), l2_norm_clip=1.0, noise_multiplier=1.0,
      population_size=32, metrics_noise_stddev=0.0),
      loss=K.losses.SparseCategoricalCrossentropy(from_logits=True),
      metrics=["accuracy"])
  history = model.fit(x, y, batch_size=32, epochs=1, verbose=0).history
  assert history["dp_accuracy"][0] == pytest.approx(history["accuracy"][0])


@pytest.mark.parametrize("K", KERAS)
def test_dp_accuracy_reads_a_column_of_integer_labels(K):
  # Labels shaped [batch, 1] (as CIFAR-10's) are integer labels, not
  # one-hot rows whose argmax would always be class 0.
  x, y = helpers.make_data("dense", 32)
  y = y.reshape(-1, 1)
  model = tf_dp.keras.make_private(helpers.build_model(K, "dense"))
  model.compile(optimizer=tf_dp.DPOptimizer(
      K.optimizers.SGD(0.0), l2_norm_clip=1.0, noise_multiplier=1.0,
      population_size=32, metrics_noise_stddev=0.0),
      loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  model.fit(x, y, batch_size=32, epochs=1, verbose=0)
  predicted = np.argmax(model.predict(x, verbose=0), axis=-1)
  accuracy = float(np.mean(predicted == y[:, 0]))
  assert accuracy != pytest.approx(float(np.mean(y == 0)))
  assert float(model.optimizer.dp_engine.dp_metrics["accuracy"].numpy()) == (
      pytest.approx(accuracy))


@pytest.mark.parametrize("K", KERAS)
def test_dp_accuracy_of_a_one_unit_output_is_refused(K):
  x, y = helpers.make_data("dense", 8)
  model = tf_dp.keras.make_private(K.Sequential([
      K.layers.Input((6,)), K.layers.Dense(1, activation="sigmoid")]))
  model.compile(optimizer=tf_dp.DPOptimizer(
      K.optimizers.SGD(0.1), l2_norm_clip=1.0, noise_multiplier=1.0,
      population_size=8, metrics_noise_stddev=1.0),
      loss=K.losses.BinaryCrossentropy())
  with pytest.raises(ValueError, match="1 output unit"):
    model.fit(x, (y > 0).astype("float32"), batch_size=8, verbose=0)


@pytest.mark.parametrize("K", KERAS)
def test_metrics_query_costs_privacy_in_the_same_ledger_sample(K):
  x, y = helpers.make_data("dense", 64)
  model = tf_dp.keras.make_private(helpers.build_model(K, "dense"))
  model.compile(optimizer=tf_dp.DPOptimizer(
      K.optimizers.SGD(0.1), l2_norm_clip=1.0, noise_multiplier=1.0,
      population_size=64, metrics_noise_stddev=20.0),
      loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  model.fit(x, y, batch_size=16, epochs=1, verbose=0)
  samples = model.optimizer.ledger.to_dict()["samples"]
  assert len(samples) == 4
  assert sorted(q["l2_norm_clip"] for q in samples[0]["sum_queries"]) == (
      pytest.approx([1.0, math.sqrt(3)]))
  z = (1.0 + (math.sqrt(3) / 20.0) ** 2) ** -0.5  # eq. (1)
  eps, _ = tf_dp.analysis.compute_epsilon_from_ledger(
      model.optimizer.ledger, 1e-5)
  expected, _ = tf_dp.analysis.compute_dp_sgd_privacy(
      64, 16, z, 1, 1e-5, sampling="fixed_size")
  assert eps == pytest.approx(expected, rel=1e-4)
