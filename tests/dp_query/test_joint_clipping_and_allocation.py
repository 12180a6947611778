"""Tests of joint clipping and of the allocation strategies (eq. 1)."""

import math

import numpy as np
import pytest
import tensorflow as tf

from tf_dp.dp_query import GaussianSumQuery
from tf_dp.dp_query import JointClippingQuery
from tf_dp.dp_query import NestedQuery
from tf_dp.dp_query import allocation
from tf_dp.dp_query import build_query
from tf_dp.dp_query import effective_noise_multiplier
from tests.dp_query.test_gaussian_query import run_query


def test_joint_clipping_without_clipping_returns_inputs_exactly():
  # Scales are powers of two, so dividing and multiplying back is exact.
  query = JointClippingQuery([1.0, 64.0], l2_norm_clip=math.sqrt(2),
                             stddev=0.0)
  rec = [tf.constant([0.5, -0.25]), tf.constant([32.0, 16.0, 8.0])]
  result, _, _ = run_query(query, [rec])
  np.testing.assert_array_equal(result[0], rec[0].numpy())
  np.testing.assert_array_equal(result[1], rec[1].numpy())


def test_joint_clipping_clips_in_scaled_space():
  query = JointClippingQuery([1.0, 100.0], l2_norm_clip=1.0, stddev=0.0)
  rec = [tf.constant([3.0]), tf.constant([400.0])]  # scaled: (3, 4), norm 5.
  result, _, event = run_query(query, [rec])
  np.testing.assert_allclose(result[0], [0.6], rtol=1e-6)
  np.testing.assert_allclose(result[1], [80.0], rtol=1e-6)
  assert float(event.l2_norm_clip) == 1.0


def test_joint_clipping_noise_is_scale_times_sigma():
  # 100000 draws per vector: 1% tolerance > 4 sd.
  query = JointClippingQuery([1.0, 100.0], 1.0, stddev=0.01, noise_seed=3)
  result, _, event = run_query(query, [[tf.zeros([100000]),
                                        tf.zeros([100000])]])
  assert np.std(result[0]) == pytest.approx(0.01, rel=0.01)
  assert np.std(result[1]) == pytest.approx(1.0, rel=0.01)
  assert float(event.noise_stddev) == pytest.approx(0.01)


def test_joint_clipping_rejects_bad_scale():
  with pytest.raises(ValueError, match=r"scales\[1\]"):
    JointClippingQuery([1.0, 0.0], 1.0, 1.0)


@pytest.mark.parametrize("clipping", ["per_layer", "dimensionality_adjusted"])
@pytest.mark.parametrize("noise", ["proportional", "dimensionality_adjusted"])
def test_strategies_keep_total_bound_and_effective_noise(clipping, noise):
  dims = [100, 10, 1000, 1]
  clips = allocation.group_clips(2.0, dims, clipping)
  assert sum(c * c for c in clips) == pytest.approx(4.0)
  stddevs = allocation.group_stddevs(1.3, clips, dims, noise)
  assert effective_noise_multiplier(clips, stddevs) == pytest.approx(1.3)


def test_strategy_hand_values():
  dims = [1, 3]
  assert allocation.group_clips(2.0, dims, "per_layer") == pytest.approx(
      [math.sqrt(2), math.sqrt(2)])
  assert allocation.group_clips(2.0, dims, "dimensionality_adjusted") == (
      pytest.approx([1.0, math.sqrt(3)]))
  assert allocation.group_stddevs(1.0, [1.0, 2.0], dims, "proportional") == (
      pytest.approx([math.sqrt(2), 2 * math.sqrt(2)]))
  assert allocation.group_stddevs(
      1.0, [1.0, 2.0], dims, "dimensionality_adjusted") == pytest.approx(
          [2.0, 2.0 * math.sqrt(4 / 3)])


def test_effective_noise_multiplier_edge_cases():
  assert effective_noise_multiplier([1.0, 0.0], [2.0, 0.0]) == 2.0
  assert effective_noise_multiplier([1.0, 1.0], [2.0, 0.0]) == 0.0
  assert effective_noise_multiplier([0.0], [0.0]) == math.inf


def test_build_query_flat_and_per_layer():
  template = [tf.zeros([3, 4]), tf.zeros([4])]
  flat = build_query(template, 1.0, 1.1)
  assert isinstance(flat, GaussianSumQuery) and flat.stddev == pytest.approx(
      1.1)
  nested = build_query(template, 1.0, 1.1, clipping="per_layer")
  assert isinstance(nested, NestedQuery)
  clips = [q.l2_norm_clip for q in nested.queries]
  stddevs = [q.stddev for q in nested.queries]
  assert effective_noise_multiplier(clips, stddevs) == pytest.approx(1.1)


def test_unknown_strategy():
  with pytest.raises(ValueError, match="clipping strategy"):
    allocation.group_clips(1.0, [1], "bogus")
