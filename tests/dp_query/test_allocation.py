"""Tests of the clip and noise allocation strategies and build_query
(eq. (1) of McMahan & Andrew 2018)."""

import math

import pytest
import tensorflow as tf

from tf_dp.dp_query import GaussianSumQuery
from tf_dp.dp_query import NestedQuery
from tf_dp.dp_query import allocation
from tf_dp.dp_query import build_query
from tf_dp.dp_query import effective_noise_multiplier


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
