"""QuantileEstimatorQuery, its non-private twin, and the adaptive clip's
update rules (Andrew et al. 2021)."""

import numpy as np
import pytest
import tensorflow as tf

from tf_dp.dp_query import NoPrivacyQuantileEstimatorQuery
from tf_dp.dp_query import QuantileAdaptiveClipSumQuery
from tf_dp.dp_query import QuantileEstimatorQuery
from tf_dp.dp_query import events
from tests.dp_query.test_gaussian_query import run_query


def _scalars(values):
  return [tf.constant(v, tf.float32) for v in values]


@pytest.mark.parametrize("geometric", [True, False])
def test_one_step_of_each_update_rule(geometric):
  # Records 1..10 against estimate 3: 3 of 10 below, fraction 0.3; target
  # 0.5 and rate 0.5 give the step -0.1.
  query = QuantileEstimatorQuery(3.0, 0.5, 0.5, 0.0, 10.0,
                                 geometric_update=geometric)
  estimate, state, event = run_query(query, _scalars(range(1, 11)))
  expected = 3.0 * np.exp(0.1) if geometric else 3.0 + 0.1
  assert float(estimate) == pytest.approx(expected, rel=1e-6)
  assert float(state.estimate) == pytest.approx(expected, rel=1e-6)
  assert float(event.l2_norm_clip) == 0.5
  assert float(event.noise_stddev) == 0.0


@pytest.mark.parametrize("geometric", [True, False])
def test_estimate_converges_to_the_target_quantile(geometric):
  # Uniform values on [0, 10]: the 0.8 quantile is 8. No noise, 300 lots.
  rng = np.random.default_rng(0)
  query = QuantileEstimatorQuery(1.0, 0.8, 0.2 if geometric else 1.0, 0.0,
                                 100.0, geometric_update=geometric)
  # One traced step, each of the 100 values accumulated as run_query does.
  step = tf.function(lambda values, state: run_query(
      query, [values[i] for i in range(100)], state)[1])
  state = query.initial_global_state()
  for _ in range(300):
    state = step(tf.constant(rng.uniform(0, 10, 100), tf.float32), state)
  assert float(state.estimate) == pytest.approx(8.0, abs=0.6)


def test_noised_fraction_is_clamped_to_the_unit_interval():
  # Huge noise: whatever the draw, one step moves the estimate by at most
  # the learning rate (arithmetic) as the fraction stays in [0, 1].
  query = QuantileEstimatorQuery(0.0, 0.5, 0.25, 1e6, 4.0,
                                 geometric_update=False)
  for _ in range(5):
    estimate, _, _ = run_query(query, _scalars([1.0, 2.0]))
    assert abs(float(estimate)) <= 0.125 + 1e-6


def test_noise_on_the_bit_sum_has_the_configured_stddev():
  # Arithmetic, rate 1, target 0.5: estimate = -(noise / expected), while
  # no draw pushes the fraction outside [0, 1].
  stddev, expected = 0.5, 100.0
  query = QuantileEstimatorQuery(0.0, 0.5, 1.0, stddev, expected,
                                 geometric_update=False, noise_seed=7)
  draws = []
  state = query.initial_global_state()
  for _ in range(400):
    sample = query.initial_sample_state()
    estimate, state, _ = query.get_noised_result(
        sample, state._replace(estimate=tf.constant(0.0)))
    draws.append(-float(estimate) * expected)
  # 400 draws: the sample sd has relative sd 1/sqrt(800) = 3.5%, so 15% is
  # 4.2 sd (2e-5 two-sided): the noise seed is fixed, so these are the
  # same draws in every run.
  assert np.std(draws) == pytest.approx(stddev, rel=0.15)


def test_no_privacy_twin_uses_the_exact_fraction_and_says_epsilon_inf():
  query = NoPrivacyQuantileEstimatorQuery(3.0, 0.5, 0.5,
                                          geometric_update=False)
  estimate, _, event = run_query(query, _scalars(range(1, 11)))
  assert float(estimate) == pytest.approx(3.1, rel=1e-6)
  flat = events.flatten_events(event)
  assert float(flat[0].noise_stddev) == 0.0
  assert float(flat[0].l2_norm_clip) == float("inf")


def test_learning_rate_can_be_a_variable_or_zero():
  rate = tf.Variable(0.5)
  query = QuantileEstimatorQuery(3.0, 0.5, rate, 0.0, 10.0,
                                 geometric_update=False)
  estimate, _, _ = run_query(query, _scalars(range(1, 11)))
  assert float(estimate) == pytest.approx(3.1, rel=1e-6)
  rate.assign(0.0)
  estimate, _, _ = run_query(query, _scalars(range(1, 11)))
  assert float(estimate) == pytest.approx(3.0, rel=1e-6)


def test_adaptive_clip_arithmetic_update_and_its_floor():
  # [-6, 8] (norm 10) is clipped at 5, [4, -3] (norm 5) is not: fraction
  # 0.5 against target 1 with rate 1 moves the clip 5 -> 5.5 (arithmetic).
  query = QuantileAdaptiveClipSumQuery(5.0, 0.0, 1.0, 1.0, 0.0, 2.0,
                                       geometric_update=False)
  result, state, _ = run_query(query, [tf.constant([-6.0, 8.0]),
                                       tf.constant([4.0, -3.0])])
  np.testing.assert_allclose(result, [1.0, 1.0], atol=1e-6)
  assert float(state.l2_norm_clip) == pytest.approx(5.5, rel=1e-6)
  # A target of 0 and a large rate would take the clip below 0: floored.
  query = QuantileAdaptiveClipSumQuery(0.5, 1.0, 0.0, 10.0, 0.0, 2.0,
                                       geometric_update=False)
  _, state, _ = run_query(query, [tf.constant([0.1, 0.0])])
  assert 0 < float(state.l2_norm_clip) <= 1e-12


def test_invalid_arguments_name_themselves():
  with pytest.raises(ValueError, match="target_quantile"):
    QuantileEstimatorQuery(1.0, 1.5, 0.1, 0.0, 10.0)
  with pytest.raises(ValueError, match="learning_rate"):
    QuantileEstimatorQuery(1.0, 0.5, -0.1, 0.0, 10.0)
  with pytest.raises(ValueError, match="below_estimate_stddev"):
    QuantileEstimatorQuery(1.0, 0.5, 0.1, -1.0, 10.0)
  with pytest.raises(ValueError, match="expected_num_records"):
    QuantileEstimatorQuery(1.0, 0.5, 0.1, 1.0, 0.0)
