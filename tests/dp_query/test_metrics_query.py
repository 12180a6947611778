"""Tests of DPMetricsQuery: exact counts without noise, and the noise's
statistics. Its use in Keras fit (``dp_accuracy``):
tests/keras/test_dp_engine.py."""

import math

import numpy as np
import pytest
import tensorflow as tf

from tf_dp.dp_query import DPMetricsQuery
from tests.dp_query.test_gaussian_query import run_query


def test_metrics_query_counts_without_noise():
  query = DPMetricsQuery(num_classes=3, stddev=0.0)
  labels = [0, 1, 2, 2]
  preds = [[0.9, 0.1, 0.0], [0.9, 0.1, 0.0], [0.0, 0.0, 1.0], [0.0, 1.0, 0.0]]
  records = [(tf.constant(l), tf.constant(p)) for l, p in zip(labels, preds)]
  result, _, event = run_query(query, records)
  assert float(result["count"]) == 4.0
  assert float(result["correct"]) == 2.0
  np.testing.assert_allclose(result["class_counts"], [1.0, 1.0, 2.0])
  assert float(result["accuracy"]) == pytest.approx(0.5)
  assert float(event.l2_norm_clip) == pytest.approx(math.sqrt(3))


def test_metrics_query_noise_statistics():
  # 20000 independent samples of one noised count: 2% tolerance > 4 sd.
  query = DPMetricsQuery(num_classes=2, stddev=4.0, noise_seed=5)
  state = query.initial_global_state()
  counts = []
  # Draw many samples cheaply by noising zero states in a tf.function.
  sample = query.initial_sample_state()

  @tf.function
  def draws(state):
    out = []
    for _ in range(50):
      res, state, _ = query.get_noised_result(sample, state)
      out.append(res["count"])
    return tf.stack(out), state

  for _ in range(400):
    values, state = draws(state)
    counts.append(values.numpy())
  assert np.std(np.concatenate(counts)) == pytest.approx(4.0, rel=0.02)
