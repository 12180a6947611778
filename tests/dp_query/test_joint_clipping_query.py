"""Tests of JointClippingQuery: one clip in a scaled space, noise scaled
back per group."""

import math

import numpy as np
import pytest
import tensorflow as tf

from tf_dp.dp_query import JointClippingQuery
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
