"""Tests of NestedQuery: one query per group of a structure, each clipped
and noised on its own."""

import numpy as np
import pytest
import tensorflow as tf

from tf_dp.dp_query import GaussianSumQuery
from tf_dp.dp_query import NestedQuery
from tf_dp.dp_query import SumQueryEvent
from tests.dp_query.test_gaussian_query import run_query


def test_nested_query_clips_each_group_separately():
  query = NestedQuery({"w": GaussianSumQuery(1.0, 0.0),
                       "b": GaussianSumQuery(10.0, 0.0)})
  rec = {"w": tf.constant([3.0, 4.0]), "b": tf.constant([3.0, 4.0])}
  result, _, events = run_query(query, [rec, rec])
  np.testing.assert_allclose(result["w"], [1.2, 1.6], rtol=1e-6)
  np.testing.assert_allclose(result["b"], [6.0, 8.0], rtol=1e-6)
  assert len(events) == 2 and all(isinstance(e, SumQueryEvent)
                                  for e in events)
  # tf.nest order: sorted keys, "b" first.
  assert [float(e.l2_norm_clip) for e in events] == [10.0, 1.0]


def test_nested_query_groups_can_be_sub_structures():
  query = NestedQuery([GaussianSumQuery(5.0, 0.0), GaussianSumQuery(1.0, 0.0)])
  rec = [[tf.constant([3.0]), tf.constant([4.0])], tf.constant([0.0, 2.0])]
  result, _, _ = run_query(query, [rec])
  np.testing.assert_allclose(result[0][0], [3.0]); np.testing.assert_allclose(
      result[1], [0.0, 1.0], rtol=1e-6)


def test_nested_query_structure_mismatch():
  query = NestedQuery({"w": GaussianSumQuery(1.0, 0.0),
                       "b": GaussianSumQuery(1.0, 0.0)})
  with pytest.raises(ValueError, match="keys"):
    query.initial_sample_state({"w": tf.zeros([2])})


def test_nested_query_noise_per_group_statistics():
  # Per-group stddevs 1 and 3, 100000 draws each: 1% tolerance > 4 sd.
  query = NestedQuery([GaussianSumQuery(1.0, 1.0, noise_seed=1),
                       GaussianSumQuery(1.0, 3.0, noise_seed=2)])
  result, _, _ = run_query(query, [[tf.zeros([100000]), tf.zeros([100000])]])
  assert np.std(result[0]) == pytest.approx(1.0, rel=0.01)
  assert np.std(result[1]) == pytest.approx(3.0, rel=0.01)
  assert abs(np.corrcoef(result[0], result[1])[0, 1]) < 0.02
