"""Tests of the queries without privacy (no clipping, no noise)."""

import numpy as np
import tensorflow as tf

from tf_dp.dp_query import NoPrivacyAverageQuery
from tests.dp_query.test_gaussian_query import run_query


def test_no_privacy_average():
  query = NoPrivacyAverageQuery()
  result, _, event = run_query(query, [tf.constant([1.0, 3.0]),
                                       tf.constant([3.0, 5.0])])
  np.testing.assert_allclose(result, [2.0, 4.0])
  assert float(event.noise_stddev) == 0.0
