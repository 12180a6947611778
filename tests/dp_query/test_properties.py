"""Property-based tests (hypothesis) of the privacy invariants."""

import math

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import numpy as np
import pytest
import tensorflow as tf

from tf_dp import analysis
from tf_dp.dp_query import GaussianSumQuery

floats = st.floats(allow_nan=True, allow_infinity=True, width=32)


@settings(max_examples=60, deadline=None)
@given(values=st.lists(floats, min_size=1, max_size=12),
       split=st.integers(0, 12),
       clip=st.floats(0.0, 1e4, allow_nan=False))
def test_every_preprocessed_record_has_norm_at_most_clip(values, split, clip):
  record = [tf.constant(values[:split], tf.float32),
            tf.constant(values[split:], tf.float32)]
  query = GaussianSumQuery(clip, 0.0)
  out = query.preprocess_record(clip, record)
  flat = np.concatenate([o.numpy().ravel() for o in out])
  assert np.all(np.isfinite(flat))
  # float32 rounding of the scale: 1e-6 relative slack.
  assert np.linalg.norm(flat.astype(np.float64)) <= clip * (1 + 1e-6) + 1e-30


@settings(max_examples=15, deadline=None)
@given(stddev=st.floats(0.01, 100.0), scale=st.floats(0.0, 1e3),
       seed=st.integers(0, 2 ** 31))
def test_noised_minus_clipped_sum_has_the_configured_stddev(stddev, scale,
                                                            seed):
  # 40000 coordinates: the sample stddev has relative sd 0.35%; 3% is 8 sd.
  query = GaussianSumQuery(1.0, stddev, noise_seed=seed)
  state = query.initial_global_state()
  record = tf.fill([40000], scale)
  sample = query.accumulate_record(1.0, query.initial_sample_state(record),
                                   record)
  result, _, _ = query.get_noised_result(sample, state)
  noise = result.numpy().astype(np.float64) - sample.numpy()
  assert np.std(noise) == pytest.approx(stddev, rel=0.03)
  assert abs(np.mean(noise)) < 8 * stddev / math.sqrt(40000)


@pytest.mark.stack_independent  # Pure Python accounting (tests/conftest.py).
@settings(max_examples=40, deadline=None)
@given(q=st.floats(1e-4, 1.0), z=st.floats(0.3, 50.0),
       steps=st.integers(1, 5000), more=st.integers(1, 5000),
       sampling=st.sampled_from(["poisson", "fixed_size"]))
def test_ledger_epsilon_is_monotone_in_steps(q, z, steps, more, sampling):
  def ledger(n):
    sample = {"population_size": 100000, "sampling_probability": q,
              "sampling": sampling, "examples_per_record": 1,
              "sum_queries": [{"l2_norm_clip": 1.0, "noise_stddev": z}]}
    return {"format": "tf_dp.privacy_ledger/1", "dropped_samples": 0,
            "samples": [sample] * n}
  import warnings  # pylint: disable=g-import-not-at-top
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)
    eps1, _ = analysis.compute_epsilon_from_ledger(ledger(steps), 1e-5)
    eps2, _ = analysis.compute_epsilon_from_ledger(ledger(steps + more), 1e-5)
  assert eps1 <= eps2 + 1e-9
