"""Tests of tf_dp.dp_query.dp_query: the helpers and the sum-aggregation
base class every sum query builds on (through GaussianSumQuery with no
noise, the simplest concrete subclass; references are sums by hand)."""

import numpy as np
import pytest
import tensorflow as tf

from tf_dp.dp_query import GaussianSumQuery
from tf_dp.dp_query import dp_query
from tf_dp.errors import RecordStructureError


def test_zeros_like_template_from_tensors_and_specs():
  template = {"w": tf.TensorSpec([2, 3], tf.float64),
              "b": tf.ones([4], tf.float32)}
  zeros = dp_query.zeros_like_template(template)
  assert zeros["w"].dtype == tf.float64 and zeros["w"].shape == (2, 3)
  assert zeros["b"].dtype == tf.float32 and zeros["b"].shape == (4,)
  assert not np.any(zeros["w"]) and not np.any(zeros["b"])


@pytest.mark.parametrize("record", [
    {"w": 1.0}, [1.0, 2.0, 3.0], (1.0, 2.0), [1.0, [2.0]]])
def test_check_record_structure_refuses_another_nest(record):
  with pytest.raises(RecordStructureError, match="Expected the structure of"):
    dp_query.check_record_structure([0.0, 0.0], record)
  assert issubclass(RecordStructureError, ValueError)


def test_check_record_structure_accepts_the_same_nest():
  dp_query.check_record_structure({"a": [0, 0]}, {"a": [5.0, 6.0]})


def test_sum_aggregation_accumulates_and_merges_exact_sums():
  query = GaussianSumQuery(l2_norm_clip=100.0, stddev=0.0)
  params = query.derive_sample_params(query.initial_global_state())
  template = [tf.TensorSpec([2], tf.float32), tf.TensorSpec([], tf.float32)]
  records = [[tf.constant([1.0, 2.0]), tf.constant(3.0)],
             [tf.constant([-4.0, 0.5]), tf.constant(1.0)],
             [tf.constant([2.0, 2.0]), tf.constant(-6.0)]]
  halves = []
  for part in (records[:1], records[1:]):
    state = query.initial_sample_state(template)
    for r in part:
      state = query.accumulate_record(params, state, r)
    halves.append(state)
  merged = query.merge_sample_states(*halves)
  np.testing.assert_allclose(merged[0], [-1.0, 4.5])
  assert float(merged[1]) == -2.0
  with pytest.raises(RecordStructureError, match="sample state"):
    query.merge_sample_states(halves[0], halves[0][:1])


def test_an_incomplete_query_cannot_be_built():
  class OnlyParams(dp_query.DPQuery):
    def derive_sample_params(self, global_state):
      return global_state
  with pytest.raises(TypeError, match="abstract"):
    OnlyParams()
