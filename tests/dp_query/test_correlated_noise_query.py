"""CorrelatedNoiseQuery: clipped sums without noise, the noise covariance
sigma^2 C^+ C^+^T, the state's size and its checkpoint."""

import warnings

import numpy as np
import pytest
import tensorflow as tf

from tf_dp.analysis import matrix_factorization as mf
from tf_dp.core import lot as lot_lib
from tf_dp.dp_query import events
from tf_dp.dp_query.correlated_noise_query import CorrelatedNoiseQuery
from tf_dp.errors import PrivacyError
from tf_dp.privacy_ledger import PrivacyLedger

STRATEGIES = {
    "banded": lambda steps: mf.banded_strategy(steps, 3),
    "identity": lambda steps: mf.banded_strategy(steps, 1),
    "tree": lambda steps: mf.tree_strategy(steps),
    "tree_restarted": lambda steps: mf.tree_strategy(steps, 2),
}


def _query(kind, steps, template, multiplier=1.0, clip=1.0, seed=1):
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)   # fixed noise_seed
    query = CorrelatedNoiseQuery(clip, multiplier, STRATEGIES[kind](steps),
                                 template, noise_seed=seed)
    return query, query.initial_global_state()


def _release(query, state, records):
  params = query.derive_sample_params(state)
  sample = query.initial_sample_state(records[0])
  for r in records:
    sample = query.accumulate_record(params, sample, r)
  return query.get_noised_result(sample, state)


@pytest.mark.parametrize("kind", sorted(STRATEGIES))
def test_without_noise_equals_clipped_sums(kind):
  template = {"a": tf.zeros([2]), "b": tf.zeros([1, 1])}
  query, state = _query(kind, 6, template, multiplier=0.0, clip=2.5)
  for step in range(6):
    records = [{"a": tf.constant([3.0, 0.0]), "b": tf.constant([[4.0 * step]])},
               {"a": tf.constant([1.0, 1.0]), "b": tf.constant([[0.5]])}]
    result, state, event = _release(query, state, records)
    scale = min(1.0, 2.5 / np.hypot(3.0, 4.0 * step))
    np.testing.assert_allclose(result["a"], [3 * scale + 1, 1], rtol=1e-6)
    np.testing.assert_allclose(result["b"], [[4 * step * scale + 0.5]],
                               rtol=1e-6)
    assert isinstance(event, events.CorrelatedNoiseEvent)
    assert int(event.step) == step and float(event.l2_norm_clip) == 2.5
  assert int(state.step) == 6


@pytest.mark.parametrize("kind,steps", [("banded", 8), ("tree", 8),
                                        ("tree_restarted", 10),
                                        ("identity", 4)])
def test_noise_covariance_is_sigma_squared_c_plus_c_plus_transposed(kind,
                                                                    steps):
  # 20000 coordinates are 20000 independent draws of the noise sequence.
  coords, sigma, clip = 20000, 1.5, 2.0
  query, state = _query(kind, steps, [tf.zeros([coords])], sigma, clip)
  run = tf.function(lambda s: query.get_noised_result([tf.zeros([coords])],
                                                      s)[:2])
  noises = []
  for _ in range(steps):
    result, state = run(state)
    noises.append(result[0].numpy().astype(np.float64))
  w = np.stack(noises)
  empirical = w @ w.T / coords
  left_inverse = query.strategy.noise_matrix()
  expected = (sigma * clip) ** 2 * left_inverse @ left_inverse.T
  # Standard error of a sample covariance of Gaussians:
  # sqrt((S_ii S_jj + S_ij^2) / N); 5 of them (fixed seed, so the check is
  # deterministic; about 1 in 10^5 entries would exceed it by chance).
  diag = np.diag(expected)
  stderr = np.sqrt((np.outer(diag, diag) + expected ** 2) / coords)
  assert np.all(np.abs(empirical - expected) <= 5 * stderr), (
      np.max(np.abs(empirical - expected) / stderr))


def test_banded_recursion_is_c_w_equals_z():
  # The same seed, identity strategy, gives z itself; banded gives C^{-1} z.
  coords, steps = 50, 6
  strategy = mf.Strategy(mf.BANDED_TOEPLITZ, steps,
                         coefficients=(0.8, -0.3, 0.2))
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    banded = CorrelatedNoiseQuery(1.0, 1.0, strategy, [tf.zeros([coords])],
                                  noise_seed=7)
    plain = CorrelatedNoiseQuery(1.0, 1.0, mf.Strategy(
        mf.BANDED_TOEPLITZ, steps, coefficients=(1.0,)), [tf.zeros([coords])],
                                 noise_seed=7)
  sb, sp = banded.initial_global_state(), plain.initial_global_state()
  ws, zs = [], []
  for _ in range(steps):
    (w,), sb, _ = banded.get_noised_result([tf.zeros([coords])], sb)
    (z,), sp, _ = plain.get_noised_result([tf.zeros([coords])], sp)
    ws.append(w.numpy())
    zs.append(z.numpy())
  np.testing.assert_allclose(strategy.matrix() @ np.stack(ws), np.stack(zs),
                             atol=1e-5)


@pytest.mark.parametrize("kind,slots", [("banded", 2), ("identity", 0),
                                        ("tree", 4), ("tree_restarted", 3)])
def test_state_memory_is_slots_times_parameters(kind, slots):
  template = [tf.zeros([30, 4]), tf.zeros([4], tf.float64)]
  query, _ = _query(kind, 8, template)
  variables = lot_lib.global_state_variables(query)
  history = tf.nest.flatten(variables.history)
  assert [v.shape.as_list() for v in history] == [[slots, 30, 4], [slots, 4]]
  assert [v.dtype for v in history] == [tf.float32, tf.float64]
  assert sum(int(np.prod(v.shape)) for v in history) == slots * 124
  assert query.state_size == slots * 124


@pytest.mark.parametrize("kind", ["banded", "tree"])
def test_checkpoint_restores_the_noise_state(kind, tmp_path):
  template = [tf.zeros([5])]
  query, _ = _query(kind, 8, template, seed=3)
  variables = lot_lib.global_state_variables(query)

  def step():
    result, new, _ = query.get_noised_result([tf.zeros([5])],
                                             lot_lib.read(variables))
    lot_lib.assign(variables, new)
    return result[0].numpy()

  for _ in range(3):
    step()
  path = tf.train.Checkpoint(state=tf.nest.flatten(variables)).write(
      str(tmp_path / "ckpt"))
  later = [step(), step()]
  tf.train.Checkpoint(state=tf.nest.flatten(variables)).read(path)
  assert int(variables.step.numpy()) == 3
  np.testing.assert_array_equal([step(), step()], later)


def test_privacy_ledger_refuses_the_event():
  query, state = _query("banded", 4, [tf.zeros([2])])
  _, _, event = query.get_noised_result([tf.zeros([2])], state)
  with pytest.raises(PrivacyError, match="CorrelatedNoiseEvent"):
    PrivacyLedger(100, 0.1).record_sample(event)


def test_bad_arguments():
  with pytest.raises(TypeError, match="strategy must be"):
    CorrelatedNoiseQuery(1.0, 1.0, "banded", [tf.zeros([2])])
  with pytest.raises(ValueError, match="noise_multiplier"):
    CorrelatedNoiseQuery(1.0, -1.0, mf.tree_strategy(4), [tf.zeros([2])])


@pytest.mark.parametrize("kind", ["banded", "tree"])
def test_secure_mode_noise_has_the_strategy_variances(kind):
  coords, steps = 20000, 6
  query = CorrelatedNoiseQuery(1.0, 2.0, STRATEGIES[kind](steps),
                               [tf.zeros([coords])], secure_mode=True)
  state = query.initial_global_state()
  variances = []
  for _ in range(steps):
    (w,), state, _ = query.get_noised_result([tf.zeros([coords])], state)
    variances.append(float(np.mean(w.numpy().astype(np.float64) ** 2)))
  left_inverse = query.strategy.noise_matrix()
  expected = 4.0 * np.sum(left_inverse ** 2, axis=1)
  # The sample variance of N Gaussians has standard error var sqrt(2 / N).
  np.testing.assert_array_less(np.abs(np.array(variances) - expected),
                               5 * expected * np.sqrt(2 / coords))
