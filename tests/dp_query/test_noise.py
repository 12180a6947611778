"""Noise secrecy and statistics: the key is not in the state, no draw repeats
after a rewound state, secure mode, and N(0, stddev^2) i.i.d. in both modes.

Statistical tolerances are 5 standard deviations of the statistic under the
null hypothesis (a false failure about once in 1.7 million runs) on draws
from a fixed seed (the same draws every run), unless a line says otherwise.
Draws from OS entropy (the default key, secure mode) differ in every run:
their tolerances are UNSEEDED_SDS = 6.5 sd (8e-11 per statistic; about 110
such statistics in a CI run of both stacks: below 1e-8 per run), on
samples 1.69 times larger, so that the bounds are as tight as 5 sd were.
"""

import contextlib
import json
import math
import os
import subprocess
import sys
import weakref

import numpy as np
import pytest
from scipy import stats
import tensorflow as tf

from tf_dp.dp_query import GaussianSumQuery
from tf_dp.dp_query import NestedQuery
from tf_dp.dp_query import QuantileAdaptiveClipSumQuery
from tf_dp.dp_query import build_query
from tf_dp.dp_query import noise

MODES = [pytest.param(False, id="default"), pytest.param(True, id="secure")]


def process_key_halves():
  """The int64 halves of every per-process key created so far."""
  keys = list(noise._KEYS.values())  # pylint: disable=protected-access
  return {int(h) for k in keys for h in np.asarray(k.key.numpy()).ravel()}


def draw(query, state, shape=(6,)):
  zeros = tf.nest.map_structure(lambda _: tf.zeros(shape),
                                query.initial_sample_state(tf.zeros(shape)))
  return query.get_noised_result(zeros, state)


@pytest.mark.parametrize("secure", MODES)
def test_state_holds_only_a_public_nonce(secure):
  query = GaussianSumQuery(1.0, 1.0, secure_mode=secure)
  state = query.initial_global_state()
  np.testing.assert_array_equal(state.noise_nonce, [0, 0])
  _, state, _ = draw(query, state)
  np.testing.assert_array_equal(state.noise_nonce, [0, 1])
  leaves = [np.asarray(leaf) for leaf in tf.nest.flatten(state)]
  values = {int(v) for leaf in leaves if leaf.dtype.kind == "i"
            for v in leaf.ravel()}
  assert not values & process_key_halves()


def test_key_restored_from_an_old_checkpoint_is_scrubbed():
  # Checkpoints of earlier versions held [key, counter]; the key is ignored
  # and dropped from the state at the next draw.
  query = GaussianSumQuery(1.0, 1.0)
  old = query.initial_global_state()._replace(
      noise_nonce=tf.constant([123456789, 7], tf.int64))
  _, new, _ = draw(query, old)
  np.testing.assert_array_equal(new.noise_nonce, [0, 8])


def _eager(query, state):
  return draw(query, state)[0].numpy()


def _function(query, state):
  return tf.function(lambda s: draw(query, s)[0])(state).numpy()


def _xla(query, state):
  return tf.function(lambda s: draw(query, s)[0], jit_compile=True)(
      state).numpy()


def _v1_graph(query, state):
  with tf.Graph().as_default():
    result = draw(query, tf.nest.map_structure(tf.constant, state))[0]
    assert not tf.compat.v1.global_variables()  # Nothing a Saver would save.
    with tf.compat.v1.Session() as sess:
      return sess.run(result)


CONTEXTS = [_eager, _function, _xla, _v1_graph]


@pytest.mark.parametrize("secure", MODES)
@pytest.mark.parametrize("run", CONTEXTS, ids=lambda f: f.__name__[1:])
def test_rewound_state_gives_fresh_noise(secure, run):
  if secure and run is _xla:
    pytest.skip("secure mode refuses XLA (tested below)")
  query = GaussianSumQuery(1.0, 1.0, secure_mode=secure)
  state = tf.nest.map_structure(lambda t: t.numpy(),
                                query.initial_global_state())
  first, again = run(query, state), run(query, state)
  # Same state (as after a restore), fresh draws: two independent float32
  # normals are equal with probability int phi^2 ulp < 2e-8, so one equal
  # coordinate of these 6 happens about once in 10^6 CI runs (42 per
  # stack); two, never. A repeated draw would make all 6 equal.
  assert np.sum(first == again) <= 1
  assert 0.1 < np.std(first) < 10


def test_fixed_seed_stays_reproducible_across_contexts():
  query = GaussianSumQuery(1.0, 1.0, noise_seed=11)
  state = tf.nest.map_structure(lambda t: t.numpy(),
                                query.initial_global_state())
  expected = _eager(query, state)
  for run in (_function, _v1_graph):  # XLA's stateless normals differ.
    np.testing.assert_array_equal(run(query, state), expected)


def test_quantile_query_rewound_state_gives_fresh_noise():
  query = QuantileAdaptiveClipSumQuery(1.0, 1.0, 0.5, 0.2, 1.0, 10.0)
  state = query.initial_global_state()
  sample = query.initial_sample_state(tf.zeros([6]))
  (a, s1, _), (b, s2, _) = [query.get_noised_result(sample, state)
                            for _ in range(2)]
  assert np.all(a.numpy() != b.numpy())
  assert float(s1.l2_norm_clip) != float(s2.l2_norm_clip)  # noised bits
  assert float(s1.l2_norm_clip) != float(state.l2_norm_clip)
  np.testing.assert_array_equal(s1.noise_nonce, [0, 1])


# Standard deviations of a statistic allowed on draws from OS entropy.
UNSEEDED_SDS = 6.5


def _check_standard_normal(z, label, sds=5.0):
  """z: 1-D sample that should be i.i.d. N(0, 1); each statistic within
  ``sds`` standard deviations (KS: a p-value above the two-sided normal
  tail of ``sds``)."""
  n = z.size
  assert abs(np.mean(z)) < sds / math.sqrt(n), label
  assert abs(np.std(z) - 1) < sds / math.sqrt(2 * n), label
  # Excess kurtosis: sd sqrt(24 / n).
  assert abs(stats.kurtosis(z)) < sds * math.sqrt(24 / n), label
  # Kolmogorov-Smirnov: rejects normality at the p-value of sds sd (5.7e-7
  # for 5, 8e-11 for 6.5).
  assert stats.kstest(z, "norm").pvalue > 2 * stats.norm.sf(sds), label
  # Neighbouring coordinates uncorrelated (Pearson r has sd 1/sqrt(n)).
  assert abs(np.corrcoef(z[:-1], z[1:])[0, 1]) < sds / math.sqrt(n), label


def _corr(a, b):
  return np.corrcoef(a.ravel(), b.ravel())[0, 1]


@pytest.mark.parametrize("secure", MODES)
def test_noise_is_iid_gaussian_with_the_configured_stddev(secure):
  # stddev = noise_multiplier * clip = 1.5 * 2.0; two leaves of 170k
  # coordinates, two steps (eagerly and in a tf.function), and a nested
  # query whose two parts have the same shape.
  clip, z, n = 2.0, 1.5, 170000  # OS entropy: UNSEEDED_SDS.
  query = GaussianSumQuery(clip, z * clip, secure_mode=secure)
  zeros = [tf.zeros([n]), tf.zeros([n // 4, 4])]
  state = query.initial_global_state()
  step1, state, _ = query.get_noised_result(zeros, state)
  step2 = tf.function(lambda x, s: query.get_noised_result(x, s)[0])(
      zeros, state)
  step1 = [x.numpy().ravel() / (z * clip) for x in step1]
  step2 = [x.numpy().ravel() / (z * clip) for x in step2]
  for i, leaf in enumerate(step1 + step2):
    _check_standard_normal(leaf, f"leaf {i}", UNSEEDED_SDS)
  bound = UNSEEDED_SDS / math.sqrt(n)
  assert abs(_corr(step1[0], step1[1])) < bound  # across leaves
  assert abs(_corr(step1[0], step2[0])) < bound  # across steps
  assert abs(_corr(step1[1], step2[1])) < bound
  nested = NestedQuery({"a": GaussianSumQuery(1.0, 1.0, secure_mode=secure),
                        "b": GaussianSumQuery(1.0, 1.0, secure_mode=secure)})
  parts = tf.function(lambda x, s: nested.get_noised_result(x, s)[0])(
      {"a": tf.zeros([n]), "b": tf.zeros([n])}, nested.initial_global_state())
  assert abs(_corr(parts["a"].numpy(), parts["b"].numpy())) < bound


def test_secure_sampler_is_standard_normal():
  _check_standard_normal(noise.secure_standard_normal(676001), "secure",
                         UNSEEDED_SDS)


def test_default_sampler_is_standard_normal_in_every_context():
  # 2 * 10^6 draws from leaves of odd, even, scalar and empty shapes.
  shapes = [[999999], [1000, 1000], [], [0, 3], [1]]
  seed = tf.constant([3, 4], tf.int64)
  for run in (lambda f: f(), lambda f: tf.function(f)(),
              lambda f: tf.function(f, jit_compile=True)()):
    draws = run(lambda: noise.stateless_standard_normals(shapes, seed))
    assert [d.shape.as_list() for d in draws] == shapes
    assert all(d.dtype == tf.float32 for d in draws)
    z = np.concatenate([d.numpy().ravel() for d in draws])
    _check_standard_normal(z, "default sampler")
    # u1 >= 2^-33: |z| <= sqrt(-2 ln 2^-33) = 6.76.
    assert np.all(np.isfinite(z)) and np.max(np.abs(z)) <= 6.77
  # Tail mass: P(|Z| > 4) = 6.33e-5; a binomial count, 5 sd.
  expected = 2 * stats.norm.sf(4) * z.size
  assert abs(np.sum(np.abs(z) > 4) - expected) < 5 * math.sqrt(expected)


def test_default_sampler_shapes_known_only_at_run_time():
  seed = tf.constant([5, 6], tf.int64)
  fn = tf.function(lambda n: noise.stateless_standard_normals(
      [tf.stack([n, 2]), [3]], seed), input_signature=[
          tf.TensorSpec([], tf.int32)])
  a, b = fn(tf.constant(100001))
  assert a.shape == (100001, 2) and b.shape == (3,)
  _check_standard_normal(a.numpy().ravel(), "dynamic shape")
  again = fn(tf.constant(100001))[0]
  np.testing.assert_array_equal(a, again)  # Stateless: same seed, same draw.


def test_box_muller_uniforms_never_hit_log_zero():
  # 2^-53 is the smallest u1: the largest |z| is sqrt(-2 ln 2^-53) = 8.57.
  values = noise._box_muller(200000)  # pylint: disable=protected-access
  assert np.all(np.isfinite(values)) and np.max(np.abs(values)) <= 8.58


def test_secure_mode_refuses_xla_with_a_clear_message():
  query = GaussianSumQuery(1.0, 1.0, secure_mode=True)
  with pytest.raises(ValueError, match="jit_compile=False"):
    _xla(query, query.initial_global_state())


def test_secure_mode_arguments_are_checked():
  with pytest.raises(ValueError, match="noise_seed"):
    GaussianSumQuery(1.0, 1.0, noise_seed=3, secure_mode=True)
  with pytest.raises(ValueError, match="secure_mode"):
    GaussianSumQuery(1.0, 1.0, secure_mode="yes")


@pytest.mark.parametrize("clipping", ["flat", "per_layer"])
def test_build_query_passes_secure_mode(clipping):
  template = [tf.zeros([3]), tf.zeros([2, 2])]
  query = build_query(template, 1.0, 1.0, clipping=clipping,
                      secure_mode=True)
  leaves = ([query] if clipping == "flat"
            else tf.nest.flatten(query.queries))
  assert all(q.secure_mode for q in leaves)
  result, _, _ = query.get_noised_result(template,
                                         query.initial_global_state())
  assert all(np.all(np.asarray(r) != 0) for r in tf.nest.flatten(result))


MIRRORED = r"""
import json, sys
import numpy as np
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from tf_dp.dp_query import GaussianSumQuery, noise
secure = sys.argv[1] == "secure"
query = GaussianSumQuery(1.0, 1.0, secure_mode=secure)
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
with strategy.scope():
  state = tf.nest.map_structure(tf.Variable, query.initial_global_state())

@tf.function
def step():
  def replica_fn():
    def merge(strategy, x):  # cross-replica: noise drawn once
      total = strategy.reduce("SUM", x, axis=None)
      read = tf.nest.map_structure(lambda v: v.read_value(), state)
      return query.get_noised_result(total, read)[0]
    return tf.distribute.get_replica_context().merge_call(
        merge, args=(tf.zeros([2000]),))
  return strategy.experimental_local_results(strategy.run(replica_fn))

steps = [[r.numpy() for r in step()] for _ in range(2)]
print(json.dumps({
    "replicas_equal": all(np.array_equal(s[0], r) for s in steps for r in s),
    "steps_differ": bool(np.all(steps[0][0] != steps[1][0])),
    "std": float(np.std(np.concatenate([s[0] for s in steps]))),
    "keys": len(noise._KEYS)}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("secure", MODES)
def test_mirrored_strategy_draws_once_per_step(secure):
  root = os.path.dirname(os.path.dirname(os.path.dirname(
      os.path.abspath(__file__))))
  out = subprocess.run(
      [sys.executable, "-c", MIRRORED, "secure" if secure else "default"],
      capture_output=True, text=True, timeout=600, check=False,
      env=dict(os.environ, PYTHONPATH=root, TF_CPP_MIN_LOG_LEVEL="3"))
  assert out.returncode == 0, out.stderr[-3000:]
  result = json.loads(out.stdout.strip().splitlines()[-1])
  assert result["replicas_equal"] and result["steps_differ"]
  # 4000 values: the sample stddev has sd 1/sqrt(8000) = 1.1%; 6% is 5 sd.
  assert result["std"] == pytest.approx(1.0, rel=0.06)


@pytest.mark.parametrize("strategy", ["default", "one_device"])
def test_a_users_function_that_creates_the_key_is_traced_once(monkeypatch,
                                                              strategy):
  """A query's noising called in the user's own tf.function, with no key
  yet for the strategy: the trace creates the key eagerly, outside the
  function's variable capture, so the function runs its first trace (a
  variable created by a trace would make TensorFlow trace it again)."""
  if strategy == "default":  # The key of no strategy exists yet.
    monkeypatch.setattr(noise, "_KEYS", weakref.WeakKeyDictionary())
    scope = contextlib.nullcontext()
  else:  # A new strategy has no key yet.
    scope = tf.distribute.OneDeviceStrategy("/cpu:0").scope()
  query = GaussianSumQuery(1.0, 2.0)
  keys = lambda: len(noise._KEYS)  # pylint: disable=protected-access
  with scope:
    keys_before = keys()
    state = query.initial_global_state()

    @tf.function
    def noised_sum(records):
      params = query.derive_sample_params(state)
      sample = query.initial_sample_state(records[0])
      for i in range(2):
        sample = query.accumulate_record(params, sample, records[i])
      return query.get_noised_result(sample, state)[0]

    records = tf.zeros([2, 1000])
    first, second = noised_sum(records), noised_sum(records)
    assert keys() == keys_before + 1  # Created by the trace.
  assert noised_sum.experimental_get_tracing_count() == 1
  # Fresh noise per call (the key's draw counter advances), stddev 2.
  assert not np.any(first.numpy() == second.numpy())
  # 2000 values: the sample stddev has sd 1/sqrt(4000) = 1.6%; 8% is 5 sd.
  assert np.std(np.concatenate([first, second])) == pytest.approx(2.0,
                                                                   rel=0.08)


def test_float64_sums_get_float64_noise():
  """Noise on the float32 grid added to a float64 sum lets an adversary who
  knows the other records tell neighbours apart (the sum minus the known
  part must lie on the float32 grid). Default-mode noise for a float64 sum
  is drawn in float64: at most 2 of 340k values are float32 numbers (each
  is with probability 2^-29 when its 53-bit mantissa is random: 6.3e-4
  expected, 3 or more with probability 4e-11; float32 noise would put all
  of them on the grid), and they are N(0, stddev^2) (UNSEEDED_SDS: the
  key is fresh in every run). float32 sums keep their float32 draw."""
  n, stddev = 340000, 20.0
  query = GaussianSumQuery(1.0, stddev)
  state = query.initial_global_state()
  for run in (lambda f: f(), lambda f: tf.function(f)()):
    noised = run(lambda: query.get_noised_result(
        [tf.zeros([n], tf.float64), tf.zeros([3], tf.float32)], state)[0])
    assert noised[0].dtype == tf.float64 and noised[1].dtype == tf.float32
    values = noised[0].numpy()
    on_float32_grid = values.astype(np.float32).astype(np.float64) == values
    assert np.sum(on_float32_grid) <= 2
    _check_standard_normal(values / stddev, "float64 noise", UNSEEDED_SDS)
  draws = noise.stateless_standard_normals(
      [[n]], tf.constant([7, 8], tf.int64), dtype=tf.float64)
  assert draws[0].dtype == tf.float64
  _check_standard_normal(draws[0].numpy(), "float64 sampler")
  # 53-bit uniforms: u1 >= 2^-54, |z| <= sqrt(-2 ln 2^-54) = 8.65.
  assert np.max(np.abs(draws[0].numpy())) <= 8.66


@pytest.mark.parametrize("dtype", [tf.bfloat16, tf.float16])
def test_16_bit_sums_are_noised_in_float32_and_rounded_once(dtype):
  """A 16-bit sum gets the float32 draw added in float32, and the noisy
  sum rounded once to 16 bits: never the noise rounded to 16 bits alone
  and then added in 16 bits (two roundings)."""
  generator = noise.NoiseGenerator(noise_seed=11)
  x = tf.fill([100000], tf.constant(1.0, dtype))
  nonce = tf.constant([11, 0], tf.int64)
  noised = generator.add([x], 0.1, nonce)[0]
  draw = generator.add([tf.zeros([100000], tf.float32)], 0.1, nonce)[0]
  expected = tf.cast(tf.cast(x, tf.float32) + draw, dtype)
  assert noised.dtype == dtype
  np.testing.assert_array_equal(noised.numpy().astype(np.float32),
                                expected.numpy().astype(np.float32))
