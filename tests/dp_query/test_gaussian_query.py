"""Tests of GaussianSumQuery: exact clipping and sums, noise statistics."""

import math

import numpy as np
import pytest
import tensorflow as tf

from tf_dp.dp_query import GaussianSumQuery
from tf_dp.dp_query import SumQueryEvent


def run_query(query, records, global_state=None):
  """Accumulates ``records`` into one sample and returns the noised result."""
  state = global_state or query.initial_global_state()
  params = query.derive_sample_params(state)
  sample = query.initial_sample_state(records[0])
  for r in records:
    sample = query.accumulate_record(params, sample, r)
  return query.get_noised_result(sample, state)


def test_clips_nested_record_and_sums_exactly():
  query = GaussianSumQuery(l2_norm_clip=2.5, stddev=0.0)
  rec1 = {"a": tf.constant([3.0]), "b": tf.constant([[4.0]])}  # norm 5.
  rec2 = {"a": tf.constant([1.0]), "b": tf.constant([[1.0]])}  # unclipped.
  result, _, event = run_query(query, [rec1, rec2])
  np.testing.assert_allclose(result["a"], [1.5 + 1.0], rtol=1e-6)
  np.testing.assert_allclose(result["b"], [[2.0 + 1.0]], rtol=1e-6)
  assert isinstance(event, SumQueryEvent)
  assert float(event.l2_norm_clip) == 2.5 and float(event.noise_stddev) == 0


def test_record_below_clip_is_unchanged():
  query = GaussianSumQuery(10.0, 0.0)
  rec = [tf.constant([1.0, -2.0]), tf.constant(3.0)]
  out = query.preprocess_record(10.0, rec)
  np.testing.assert_array_equal(out[0], [1.0, -2.0])
  assert float(out[1]) == 3.0


def test_clip_norm_invariant_on_random_records():
  rng = np.random.default_rng(0)
  query = GaussianSumQuery(1.5, 0.0)
  for _ in range(50):
    scale = 10.0 ** rng.uniform(-3, 3)
    rec = [tf.constant(rng.normal(size=(3, 4)) * scale, tf.float32),
           tf.constant(rng.normal(size=5) * scale, tf.float32)]
    out = query.preprocess_record(1.5, rec)
    norm = math.sqrt(sum(float(tf.reduce_sum(x * x)) for x in out))
    orig = math.sqrt(sum(float(tf.reduce_sum(x * x)) for x in rec))
    assert norm <= 1.5 * (1 + 1e-6)
    assert norm == pytest.approx(min(orig, 1.5), rel=1e-5)


def test_huge_finite_record_is_clipped_not_overflowed():
  query = GaussianSumQuery(1.0, 0.0)
  out = query.preprocess_record(1.0, [tf.constant([3e30, 4e30])])
  np.testing.assert_allclose(out[0], [0.6, 0.8], rtol=1e-6)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_record_contributes_zeros(bad):
  query = GaussianSumQuery(1.0, 0.0)
  good = [tf.constant([0.3, 0.4])]
  poisoned = [tf.constant([bad, 1.0])]
  result, _, _ = run_query(query, [good, poisoned, good])
  np.testing.assert_allclose(result[0], [0.6, 0.8], rtol=1e-6)


def test_noise_stddev_statistics():
  # 200000 draws: the sample stddev has relative sd 1/sqrt(2n) = 0.16%;
  # tolerance 1% is > 6 sd. Mean tolerance 6 * 2/sqrt(n) = 0.027.
  query = GaussianSumQuery(1.0, 2.0, noise_seed=1)
  zeros = tf.zeros([200000])
  result, _, _ = run_query(query, [zeros])
  values = result.numpy()
  assert np.std(values) == pytest.approx(2.0, rel=0.01)
  assert abs(np.mean(values)) < 0.027


def test_fresh_noise_every_sample_and_reproducible_with_fixed_seed():
  query = GaussianSumQuery(1.0, 1.0, noise_seed=7)
  state = query.initial_global_state()
  first, state2, _ = run_query(query, [tf.zeros([4])], state)
  second, _, _ = run_query(query, [tf.zeros([4])], state2)
  again, _, _ = run_query(query, [tf.zeros([4])], state)
  assert not np.allclose(first, second)
  np.testing.assert_array_equal(first, again)


def test_default_noise_seed_comes_from_os_entropy():
  a = run_query(GaussianSumQuery(1.0, 1.0), [tf.zeros([8])])[0]
  tf.random.set_seed(0)
  b = run_query(GaussianSumQuery(1.0, 1.0), [tf.zeros([8])])[0]
  assert not np.allclose(a, b)


def test_fixed_seed_warns():
  with pytest.warns(UserWarning, match="noise_seed"):
    GaussianSumQuery(1.0, 1.0, noise_seed=3).initial_global_state()


def test_zero_clip_releases_nothing():
  query = GaussianSumQuery(0.0, 0.0)
  out = query.preprocess_record(0.0, [tf.constant([1.0, 2.0])])
  np.testing.assert_array_equal(out[0], [0.0, 0.0])


def test_runs_in_tf_function_vectorized_map_and_xla():
  query = GaussianSumQuery(1.0, 0.0)
  batch = tf.constant([[3.0, 4.0], [0.3, 0.4], [6.0, 8.0]])

  @tf.function(jit_compile=True)
  def clip_all(b):
    return tf.vectorized_map(lambda r: query.preprocess_record(1.0, r), b)

  np.testing.assert_allclose(clip_all(batch),
                             [[0.6, 0.8], [0.3, 0.4], [0.6, 0.8]], rtol=1e-6)


@pytest.mark.parametrize("kwargs,name", [
    (dict(l2_norm_clip=-1.0, stddev=1.0), "l2_norm_clip"),
    (dict(l2_norm_clip=1.0, stddev=-0.5), "stddev"),
    (dict(l2_norm_clip=math.nan, stddev=1.0), "l2_norm_clip"),
    (dict(l2_norm_clip=1.0, stddev=math.inf), "stddev"),
])
def test_invalid_arguments(kwargs, name):
  with pytest.raises(ValueError, match=name):
    GaussianSumQuery(**kwargs)


def test_record_structure_mismatch_is_a_clear_error():
  query = GaussianSumQuery(1.0, 0.0)
  state = query.initial_sample_state([tf.zeros([2]), tf.zeros([3])])
  with pytest.raises(ValueError, match="structure"):
    query.accumulate_record(1.0, state, [tf.zeros([2])])
