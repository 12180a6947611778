"""Tests of tf_dp.dp_query.clipping: overflow-safe L2 norms and clipping.

Reference: the norm of the concatenated leaves in float64 numpy (Python
floats for values numpy cannot square without overflow) and
min(1, C / norm) as the scale.
"""

import math

import numpy as np
import pytest
import tensorflow as tf

from tf_dp.dp_query import clipping


def numpy_norm(leaves):
  return math.sqrt(sum(float(np.sum(np.square(np.asarray(x, np.float64))))
                       for x in leaves))


def test_global_l2_norm_of_a_nest_matches_numpy():
  rng = np.random.default_rng(0)
  record = {"a": rng.normal(size=(3, 4)).astype(np.float32),
            "b": [rng.normal(size=5).astype(np.float32),
                  np.float32(2.5)]}
  leaves = tf.nest.flatten(record)
  got = clipping.global_l2_norm(record)
  assert got.dtype == tf.float32
  assert float(got) == pytest.approx(numpy_norm(leaves), rel=1e-6)


@pytest.mark.parametrize("scale", [1e-30, 1e-20, 1e20, 1e30])
def test_global_l2_norm_neither_overflows_nor_underflows(scale):
  """float32 squares of 1e20 overflow and of 1e-30 underflow; the norm is
  computed relative to the largest entry."""
  record = [tf.constant([3.0 * scale], tf.float32),
            tf.constant([[4.0 * scale]], tf.float32)]
  assert float(clipping.global_l2_norm(record)) == pytest.approx(
      5.0 * scale, rel=1e-6)


def test_global_l2_norm_promotes_to_float64_and_handles_empty_leaves():
  record = [tf.constant([1.0, 2.0], tf.float32),
            tf.constant([2.0], tf.float64), tf.zeros([0, 3])]
  got = clipping.global_l2_norm(record)
  assert got.dtype == tf.float64 and float(got) == 3.0
  assert float(clipping.global_l2_norm([tf.zeros([4])])) == 0.0
  assert float(clipping.global_l2_norm([])) == 0.0


@pytest.mark.parametrize("norm,clip,want", [
    (0.0, 1.0, 1.0), (0.5, 1.0, 1.0), (1.0, 1.0, 1.0), (4.0, 1.0, 0.25),
    (3.0, 0.0, 0.0), (math.inf, 1.0, 0.0), (math.nan, 1.0, 0.0)])
def test_scale_from_squared_norm_is_min_one_clip_over_norm(norm, clip, want):
  sq = tf.constant([norm * norm], tf.float32)
  assert float(clipping.scale_from_squared_norm(sq, clip)[0]) == want


def test_scale_from_squared_norm_treats_rounding_below_zero_as_zero():
  scale = clipping.scale_from_squared_norm(tf.constant([-1e-12]), 1.0)
  assert float(scale[0]) == 1.0


@pytest.mark.parametrize("clip", [0.5, 2.0, 10.0])
def test_clip_by_global_l2_norm_scales_the_whole_record(clip):
  rng = np.random.default_rng(1)
  record = {"w": tf.constant(rng.normal(size=(2, 3)), tf.float32),
            "b": tf.constant(rng.normal(size=3), tf.float32)}
  clipped, norm = clipping.clip_by_global_l2_norm(record, clip)
  orig = numpy_norm(tf.nest.flatten(record))
  assert float(norm) == pytest.approx(orig, rel=1e-6)
  factor = min(1.0, clip / orig)
  for key in record:
    np.testing.assert_allclose(clipped[key], record[key].numpy() * factor,
                               rtol=1e-6)
  assert numpy_norm(tf.nest.flatten(clipped)) <= clip * (1 + 1e-6)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_record_becomes_zeros_and_reports_its_norm(bad):
  record = [tf.constant([bad, 1.0]), tf.constant([2.0], tf.float64)]
  clipped, norm = clipping.clip_by_global_l2_norm(record, 1.0)
  assert not math.isfinite(float(norm))
  for leaf, orig in zip(clipped, record):
    assert leaf.dtype == orig.dtype
    np.testing.assert_array_equal(leaf, np.zeros(orig.shape))


def test_clip_by_global_l2_norm_in_a_tf_function_with_a_tensor_clip():
  clip_fn = tf.function(clipping.clip_by_global_l2_norm)
  clipped, norm = clip_fn([tf.constant([6.0, 8.0])], tf.constant(5.0))
  np.testing.assert_allclose(clipped[0], [3.0, 4.0], rtol=1e-6)
  assert float(norm) == pytest.approx(10.0)
