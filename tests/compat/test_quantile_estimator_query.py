"""TF Privacy's quantile estimator tests, ported to
``tf_dp.compat.tensorflow_privacy``.

Inputs and expected estimates are TF Privacy's, from
``tensorflow_privacy/privacy/dp_query/quantile_estimator_query_test.py``
("exact": the non-private estimator; "fixed": the private one with zero
noise, with and without tree aggregation: the tree's noise is zero too).
The state keeps TF Privacy's field names (``current_estimate``).
``TreeQuantileEstimatorQuery`` maps onto the estimator with independent
noise per sample and warns.
"""

import numpy as np
import pytest
import tensorflow as tf

from tf_dp.compat import tensorflow_privacy as tfp
from tf_dp.compat.tensorflow_privacy.privacy.dp_query import quantile_estimator_query as qe
from tests.compat.test_dp_query import run_query


def _query(initial_estimate, target_quantile, learning_rate,
           below_estimate_stddev, expected_num_records, geometric_update,
           tree=False):
  if tree:
    with pytest.warns(UserWarning, match="tree aggregation"):
      return qe.TreeQuantileEstimatorQuery(
          initial_estimate, target_quantile, learning_rate,
          below_estimate_stddev, expected_num_records, geometric_update)
  if expected_num_records is None:
    return qe.NoPrivacyQuantileEstimatorQuery(
        initial_estimate, target_quantile, learning_rate, geometric_update)
  return qe.QuantileEstimatorQuery(
      initial_estimate, target_quantile, learning_rate, below_estimate_stddev,
      expected_num_records, geometric_update)


def _run(query, records, steps):
  state = query.initial_global_state()
  estimates = []
  for _ in range(steps):
    params = query.derive_sample_params(state)
    sample = query.initial_sample_state(records[0])
    for record in records:
      sample = query.accumulate_record(params, sample, record)
    estimate, state, _ = query.get_noised_result(sample, state)
    estimates.append(float(estimate))
  return estimates


@pytest.mark.parametrize("kind", ["exact", "fixed", "tree"])
@pytest.mark.parametrize(
    "records,initial,target,rate,geometric,expected", [
        ((8.5, 7.25), 10.0, 0.0, 1.0, False, [9.0, 8.0, 7.5, 7.0, 7.0]),
        ((5.0, 2.5), 16.0, 0.0, np.log(2.0), True,
         [8.0, 4.0, 4 / np.sqrt(2.0), 2.0, 2.0]),
        ((1.5, 2.75), 0.0, 1.0, 1.0, False, [1.0, 2.0, 2.5, 3.0, 3.0]),
        ((1.5, 3.0), 0.5, 1.0, np.log(2.0), True,
         [1.0, 2.0, 2 * np.sqrt(2.0), 4.0, 4.0]),
    ], ids=["target_zero", "target_zero_geometric", "target_one",
            "target_one_geometric"])
def test_targets_zero_and_one(kind, records, initial, target, rate,
                              geometric, expected):
  query = _query(initial, target, rate, 0.0,
                 None if kind == "exact" else 2.0, geometric, kind == "tree")
  assert float(query.initial_global_state().current_estimate) == initial
  records = [tf.constant(r) for r in records]
  np.testing.assert_allclose(_run(query, records, 5), expected, rtol=1e-5)


@pytest.mark.parametrize("kind", ["exact", "fixed", "tree"])
@pytest.mark.parametrize("start_low", [True, False])
@pytest.mark.parametrize("geometric", [True, False])
def test_linspace_converges_to_the_median(kind, start_low, geometric):
  exact = kind == "exact"
  records = [tf.constant(x) for x in np.linspace(0.0, 10.0, 21,
                                                 dtype=np.float32)]
  query = _query(1.0 if start_low else 10.0, 0.5, 1.0,
                 0.0 if exact else 1e-2, None if exact else 21, geometric,
                 kind == "tree")
  for estimate in _run(query, records, 50)[41:]:
    assert abs(estimate - 5.0) <= 0.25


@pytest.mark.parametrize("kind", ["exact", "fixed", "tree"])
@pytest.mark.parametrize("geometric", [True, False])
def test_all_equal_with_a_decaying_variable_learning_rate(kind, geometric):
  exact = kind == "exact"
  rate = tf.Variable(1.0)
  query = _query(1.0, 0.5, rate, 0.0 if exact else 1e-2,
                 None if exact else 20, geometric, kind == "tree")
  records = [tf.constant(5.0)] * 20
  state = query.initial_global_state()
  for t in range(50):
    rate.assign(1.0 / np.sqrt(t + 1))
    params = query.derive_sample_params(state)
    sample = query.initial_sample_state(records[0])
    for record in records:
      sample = query.accumulate_record(params, sample, record)
    _, state, _ = query.get_noised_result(sample, state)
    if t > 40:
      assert abs(float(state.current_estimate) - 5.0) <= 0.5


def test_non_scalar_record_is_refused():
  query = qe.NoPrivacyQuantileEstimatorQuery(
      initial_estimate=1.0, target_quantile=0.5, learning_rate=1.0)
  with pytest.raises(ValueError, match="scalar"):
    query.accumulate_record(None, None, [1.0, 2.0])


def test_tree_estimator_records_one_gaussian_query_per_sample():
  """What the ledger accounts: sensitivity 0.5, the given stddev."""
  with pytest.warns(UserWarning, match="independent Gaussian noise"):
    query = tfp.TreeQuantileEstimatorQuery(1.0, 0.5, 0.1, 3.0, 10.0)
  state = query.initial_global_state()
  sample = query.initial_sample_state(tf.constant(0.0))
  sample = query.accumulate_record(query.derive_sample_params(state), sample,
                                   tf.constant(2.0))
  _, _, event = query.get_noised_result(sample, state)
  assert (float(event.l2_norm_clip), float(event.noise_stddev)) == (0.5, 3.0)


def test_top_level_names():
  assert tfp.TreeQuantileEstimatorQuery is qe.TreeQuantileEstimatorQuery
  assert tfp.QuantileEstimatorQuery is qe.QuantileEstimatorQuery
  assert tfp.NoPrivacyQuantileEstimatorQuery is (
      qe.NoPrivacyQuantileEstimatorQuery)
  with pytest.raises(AttributeError, match="Migrating from TF Privacy"):
    getattr(tfp, "TreeAggregationQuery")
