"""Tests of NormalizedQuery: the sum divided by a public denominator."""

import numpy as np
import pytest
import tensorflow as tf

from tf_dp.dp_query import GaussianSumQuery
from tf_dp.dp_query import NormalizedQuery
from tests.dp_query.test_gaussian_query import run_query


def test_normalized_query_divides_by_public_denominator():
  query = NormalizedQuery(GaussianSumQuery(5.0, 0.0), denominator=4.0)
  result, _, event = run_query(query, [tf.constant([1.0, 2.0]),
                                       tf.constant([3.0, 0.0])])
  np.testing.assert_allclose(result, [1.0, 0.5], rtol=1e-6)
  assert float(event.l2_norm_clip) == 5.0


def test_normalized_query_rejects_bad_denominator():
  with pytest.raises(ValueError, match="denominator"):
    NormalizedQuery(GaussianSumQuery(1.0, 1.0), 0.0)
