"""TF Privacy's DPQuery tests, ported to ``tf_dp.compat.tensorflow_privacy``.

Inputs and expected values are TF Privacy's, from
``tensorflow_privacy/privacy/dp_query/{gaussian_query,nested_query,
normalized_query,no_privacy_query,quantile_adaptive_clip_sum_query}_test.py``
(TF Privacy's learning_rate=0 and arithmetic updates included).
"""

import warnings

import numpy as np
import pytest
import tensorflow as tf

import tf_dp
from tests.keras import helpers
from tf_dp.compat import tensorflow_privacy as tfp
from tf_dp.compat.tensorflow_privacy.privacy.dp_query import gaussian_query
from tf_dp.compat.tensorflow_privacy.privacy.dp_query import nested_query
from tf_dp.compat.tensorflow_privacy.privacy.dp_query import no_privacy_query
from tf_dp.compat.tensorflow_privacy.privacy.dp_query import normalized_query
from tf_dp.compat.tensorflow_privacy.privacy.dp_query import quantile_adaptive_clip_sum_query as qac
from tf_dp.core.lot_engine import GRADIENTS


def run_query(query, records, weights=None):
  """One sample through ``query``, as TF Privacy's ``test_utils.run_query``."""
  global_state = query.initial_global_state()
  params = query.derive_sample_params(global_state)
  sample_state = query.initial_sample_state(records[0])
  for i, record in enumerate(records):
    if weights is None:
      sample_state = query.accumulate_record(params, sample_state, record)
    else:
      sample_state = query.accumulate_record(params, sample_state, record,
                                             weights[i])
  result, global_state, event = query.get_noised_result(sample_state,
                                                        global_state)
  return result, global_state, event


def test_names_are_tf_dp_classes():
  assert tfp.GaussianSumQuery is tf_dp.GaussianSumQuery
  # TF Privacy's metric names (and NestedSumQuery's check) over tf_dp's.
  assert issubclass(tfp.NestedQuery, tf_dp.NestedQuery)
  assert issubclass(nested_query.NestedSumQuery, tfp.NestedQuery)
  assert tfp.NormalizedQuery is tf_dp.NormalizedQuery
  assert tfp.NoPrivacySumQuery is tf_dp.NoPrivacySumQuery
  assert issubclass(tfp.NoPrivacyAverageQuery, tf_dp.NoPrivacyAverageQuery)
  assert issubclass(tfp.QuantileAdaptiveClipSumQuery,
                    tf_dp.QuantileAdaptiveClipSumQuery)
  assert tfp.DPQuery is tf_dp.DPQuery


@pytest.mark.parametrize("clip,records", [
    (10.0, [[2.0, 0.0], [-1.0, 1.0]]),   # test_gaussian_sum_no_clip_no_noise
    (5.0, [[-6.0, 8.0], [4.0, -3.0]]),   # test_gaussian_sum_with_clip_no_noise
])
def test_gaussian_sum_no_noise(clip, records):
  """gaussian_query_test.py: both sums are [1, 1] (the first record of the
  second case is clipped to [-3, 4]); the event is the Gaussian sum query."""
  query = gaussian_query.GaussianSumQuery(l2_norm_clip=clip, stddev=0.0)
  result, _, event = run_query(query, [tf.constant(r) for r in records])
  np.testing.assert_allclose(result, [1.0, 1.0], atol=1e-6)
  assert float(event.l2_norm_clip) == clip and float(event.noise_stddev) == 0


def test_gaussian_sum_merge():
  """gaussian_query_test.py, test_gaussian_sum_merge: [3, 10]."""
  query = gaussian_query.GaussianSumQuery(10.0, 1.0)
  params = query.derive_sample_params(query.initial_global_state())
  states = []
  for records in ([[2.0, 0.0], [-1.0, 1.0]], [[3.0, 5.0], [-1.0, 4.0]]):
    state = query.initial_sample_state(tf.constant(records[0]))
    for r in records:
      state = query.accumulate_record(params, state, tf.constant(r))
    states.append(state)
  np.testing.assert_allclose(query.merge_sample_states(*states), [3.0, 10.0])


def test_gaussian_sum_incompatible_records():
  """gaussian_query_test.py, test_incompatible_records (too few on the
  right): a ValueError."""
  query = gaussian_query.GaussianSumQuery(1.0, 0.0)
  with pytest.raises(ValueError):
    run_query(query, [[tf.constant(1.0), tf.constant(1.0)],
                      [tf.constant(1.0)]])


def test_normalization():
  """normalized_query_test.py, test_normalization: [0.5, 0.5]."""
  query = normalized_query.NormalizedQuery(
      numerator_query=gaussian_query.GaussianSumQuery(5.0, 0.0),
      denominator=2.0)
  result, _, _ = run_query(query, [tf.constant([-6.0, 8.0]),
                                   tf.constant([4.0, -3.0])])
  np.testing.assert_allclose(result, [0.5, 0.5], atol=1e-6)


def _nest(x):
  return tf.nest.map_structure(tf.constant, x)


def test_nested_gaussian_sum_no_clip_no_noise():
  """nested_query_test.py: [5, [5, 5]]."""
  query = nested_query.NestedSumQuery(
      [gaussian_query.GaussianSumQuery(10.0, 0.0),
       gaussian_query.GaussianSumQuery(10.0, 0.0)])
  result, _, _ = run_query(query, [_nest([1.0, [2.0, 3.0]]),
                                   _nest([4.0, [3.0, 2.0]])])
  np.testing.assert_allclose(result[0], 5.0)
  np.testing.assert_allclose(result[1], [5.0, 5.0])


def test_nested_gaussian_average_with_clip_no_noise():
  """nested_query_test.py: records clipped to [1, [4, 3]] and [4, [1, 2]],
  divided by 5: [1, [1, 1]]."""
  query = nested_query.NestedQuery([
      normalized_query.NormalizedQuery(
          gaussian_query.GaussianSumQuery(4.0, 0.0), denominator=5.0),
      normalized_query.NormalizedQuery(
          gaussian_query.GaussianSumQuery(5.0, 0.0), denominator=5.0)])
  result, _, _ = run_query(query, [_nest([1.0, [12.0, 9.0]]),
                                   _nest([5.0, [1.0, 2.0]])])
  np.testing.assert_allclose(result[0], 1.0, atol=1e-6)
  np.testing.assert_allclose(result[1], [1.0, 1.0], atol=1e-6)


def test_no_privacy_sum_and_average():
  """no_privacy_query_test.py: sum [1, 1]; average [2, 1]; weighted
  average (weights 1 and 3) [0.25, 0.75]. Each reports epsilon = inf
  (zero noise) to the ledger."""
  result, _, event = run_query(no_privacy_query.NoPrivacySumQuery(),
                               [tf.constant([2.0, 0.0]),
                                tf.constant([-1.0, 1.0])])
  np.testing.assert_allclose(result, [1.0, 1.0])
  assert float(event.noise_stddev) == 0
  result, _, _ = run_query(no_privacy_query.NoPrivacyAverageQuery(),
                           [tf.constant([5.0, 0.0]),
                            tf.constant([-1.0, 2.0])])
  np.testing.assert_allclose(result, [2.0, 1.0])
  result, _, _ = run_query(no_privacy_query.NoPrivacyAverageQuery(),
                           [tf.constant([4.0, 0.0]),
                            tf.constant([-1.0, 1.0])], weights=[1, 3])
  np.testing.assert_allclose(result, [0.25, 0.75])


def test_quantile_adaptive_clip_sum_with_clip_no_noise():
  """quantile_adaptive_clip_sum_query_test.py, test_sum_with_clip_no_noise:
  [-6, 8] is clipped to [-3, 4], [4, -3] is not: sum [1, 1]; learning rate
  0 keeps the clip at 5."""
  query = qac.QuantileAdaptiveClipSumQuery(
      initial_l2_norm_clip=5.0, noise_multiplier=0.0,
      target_unclipped_quantile=1.0, learning_rate=0.0,
      clipped_count_stddev=0.0, expected_num_records=2.0)
  result, state, _ = run_query(query, [tf.constant([-6.0, 8.0]),
                                       tf.constant([4.0, -3.0])])
  np.testing.assert_allclose(result, [1.0, 1.0], atol=1e-6)
  assert float(state.sum_state.l2_norm_clip) == pytest.approx(5.0)


@pytest.mark.parametrize("geometric", [True, False])
def test_quantile_adaptive_clip_adaptation_target_zero(geometric):
  """quantile_adaptive_clip_sum_query_test.py, test_adaptation_target_zero
  (arithmetic, clip 10 -> 9, 8, 7.5, 7, 7 for norms 8.5 and 7.25) and
  test_adaptation_target_zero_geometric (16 -> 8, 4, 2.83, 2, 2 for norms 5
  and 2.5, rate log 2)."""
  if geometric:
    records, initial, rate = [5.0, 2.5], 16.0, np.log(2.0)
    expected = [8.0, 4.0, 4 / np.sqrt(2.0), 2.0, 2.0]
  else:
    records, initial, rate = [8.5, 7.25], 10.0, 1.0
    expected = [9.0, 8.0, 7.5, 7.0, 7.0]
  query = qac.QuantileAdaptiveClipSumQuery(
      initial_l2_norm_clip=initial, noise_multiplier=0.0,
      target_unclipped_quantile=0.0, learning_rate=rate,
      clipped_count_stddev=0.0, expected_num_records=2.0,
      geometric_update=geometric)
  state = query.initial_global_state()
  for clip in expected:
    params = query.derive_sample_params(state)
    sample = query.initial_sample_state(tf.constant([0.0]))
    for norm in records:
      sample = query.accumulate_record(params, sample, tf.constant([norm]))
    _, state, _ = query.get_noised_result(sample, state)
    assert float(state.sum_state.l2_norm_clip) == pytest.approx(clip, rel=1e-5)


@pytest.mark.parametrize("K", helpers.keras_modules())
def test_adaptive_clip_query_trains_with_tf_privacy_state(K):
  """The compat adaptive clip, with TF Privacy's state, as DPOptimizer's
  query: the clip adapts during fit (target quantile 0 lowers it: every
  norm is below a clip of 1e3), read as TF Privacy reads it."""
  model = tf_dp.keras.make_private(helpers.build_model(K, "dense"))
  query = qac.QuantileAdaptiveClipSumQuery(
      initial_l2_norm_clip=1e3, noise_multiplier=0.0,
      target_unclipped_quantile=0.0, learning_rate=tf.Variable(np.log(2.0)),
      clipped_count_stddev=0.0, expected_num_records=16,
      geometric_update=True)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)  # noise_multiplier=0.
    model.compile(optimizer=tf_dp.DPOptimizer(
        K.optimizers.SGD(0.1), dp_query=query, population_size=64,
        sampling="fixed_order"),
                  loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = helpers.make_data("dense", 64)
    model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
  state = model.optimizer.dp_engine.global_state[GRADIENTS]
  # Four lots, each halving the clip (all records unclipped, target 0).
  assert float(state.sum_state.l2_norm_clip) == pytest.approx(1e3 / 16,
                                                              rel=1e-5)
  assert float(state.quantile_estimator_state.current_estimate) == (
      pytest.approx(1e3 / 16, rel=1e-5))
