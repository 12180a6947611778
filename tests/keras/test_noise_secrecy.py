"""Checkpoints and saved models do not let anyone regenerate the DP noise;
restoring a checkpoint never repeats noise; secure mode trains end to end.

Setup of every test: a dense model (53 weights) trained by DP-SGD with
clip C = 1, noise multiplier z = 1, learning rate 1 and batches of B = 16,
so one step adds N(0, (z C / B)^2) to each weight, and the noise of a step
is (noise-free update - actual update) * B.
"""

import math
import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import tensorflow as tf

import tf_dp
from tests.keras import helpers
from tf_dp.dp_query import noise
from tf_dp.keras import backend

KERAS = helpers.keras_modules()
B, CLIP, Z, LR = 16, 1.0, 1.0, 1.0
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
# Float32 weights near 1 recover the noise to ~B * 1e-7; a reproduced draw
# matches to far better than 1e-3, an independent one differs by ~1.
MATCH = 1e-3
# (Sample stddev of 53 noise differences) / (z C): an independent draw
# gives sqrt(2) (two draws) with sd 10%; a repeated draw gives 0. Outside
# [0.7, 2.3] with probability 6.5e-9 + 5e-10 (53 s^2 / 2 is chi-squared
# with 52 degrees of freedom); the noise comes from OS entropy, fresh in
# every run.
INDEPENDENT = (0.7, 2.3)


def _compiled(K, secure=False, jit_compile=None):
  model = tf_dp.keras.make_private(helpers.build_model(K, "dense"))
  optimizer = tf_dp.DPOptimizer(K.optimizers.SGD(LR), l2_norm_clip=CLIP,
                                noise_multiplier=Z, population_size=64,
                                secure_mode=secure)
  kwargs = {} if jit_compile is None else {"jit_compile": jit_compile}
  loss = K.losses.SparseCategoricalCrossentropy(from_logits=True)
  model.compile(optimizer=optimizer, loss=loss, **kwargs)
  return model


def _flavor(K):
  return "keras3" if K is backend.keras3_module() else "keras2"


def _weights(model):
  return [np.asarray(v.numpy(), np.float64) for v in model.trainable_variables]


def _step(model, x, y):
  model.fit(x, y, batch_size=B, epochs=1, verbose=0, shuffle=False)
  return _weights(model)


def _noise_of_next_step(model, x, y):
  """Takes one step and returns the noise it added, per weight tensor."""
  expected = helpers.reference_update(model, x, y, clip=CLIP, lr=LR)
  after = _step(model, x, y)
  return [(e - a) * B / LR for e, a in zip(expected, after)], after


def _trained_one_step(K, tmp_path):
  x, y = helpers.make_data("dense", 2 * B)
  model = _compiled(K)
  _step(model, x[:B], y[:B])
  ckpt = tf.train.Checkpoint(model=model, optimizer=model.optimizer).save(
      str(tmp_path / "ckpt"))
  return model, ckpt, x[B:], y[B:]


def _key_patterns():
  """Byte and text forms of each half of every per-process noise key."""
  keys = list(noise._KEYS.values())  # pylint: disable=protected-access
  halves = [int(h) for k in keys for h in np.asarray(k.key.numpy()).ravel()]
  assert halves, "no per-process key was created"
  patterns = set()
  for h in halves:
    patterns |= {np.int64(h).tobytes(), np.int64(h).byteswap().tobytes(),
                 str(h).encode(), str(h & (2**64 - 1)).encode()}
  return halves, patterns


def _files_under(path):
  paths = [path] if os.path.isfile(path) else [
      os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs]
  for p in paths:
    with open(p, "rb") as f:
      data = f.read()
    yield p, data
    if zipfile.is_zipfile(p):
      with zipfile.ZipFile(p) as z:
        for name in z.namelist():
          yield f"{p}:{name}", z.read(name)


def _assert_no_key_in_files(path):
  _, patterns = _key_patterns()
  for name, data in _files_under(path):
    for pattern in patterns:
      assert pattern not in data, f"noise key found in {name}"


def _integer_tensors(ckpt):
  reader = tf.train.load_checkpoint(ckpt)
  for name in reader.get_variable_to_shape_map():
    value = np.asarray(reader.get_tensor(name))
    if value.dtype.kind in "iu":
      yield name, value.astype(np.int64).ravel()


@pytest.mark.parametrize("K", KERAS)
def test_checkpoint_holds_no_noise_key(K, tmp_path):
  _, ckpt, _, _ = _trained_one_step(K, tmp_path)
  halves, patterns = _key_patterns()
  reader = tf.train.load_checkpoint(ckpt)
  for name in reader.get_variable_to_shape_map():
    value = reader.get_tensor(name)
    data = value if isinstance(value, bytes) else np.asarray(value).tobytes()
    assert not any(p in data for p in patterns), name
  for name, values in _integer_tensors(ckpt):
    assert not set(values.tolist()) & set(halves), name
    if "global_state" in name:
      # The query state holds the public nonce [0, draws] only. A key from
      # os.urandom has |half| >= 2^48 with probability 1 - 2^-15 per half.
      assert np.all(np.abs(values) < 2**48), f"{name} looks like a key"
  _assert_no_key_in_files(str(tmp_path))


@pytest.mark.parametrize("K", KERAS)
def test_checkpoint_values_do_not_regenerate_the_next_noise(K, tmp_path):
  model, ckpt, x, y = _trained_one_step(K, tmp_path)
  actual, _ = _noise_of_next_step(model, x, y)
  assert 0.5 < np.std(np.concatenate([a.ravel() for a in actual])) < 2
  # Every pair of integers in the checkpoint, with the counter as stored
  # and advanced, as a stateless seed the way tf_dp derives leaf seeds.
  pairs = set()
  for _, values in _integer_tensors(ckpt):
    for i in range(len(values) - 1):
      for advance in (0, 1):
        pairs.add((int(values[i]), int(values[i + 1]) + advance))
  assert pairs
  for pair in pairs:
    seed = tf.constant(pair, tf.int64)
    for base in (seed, tf.random.experimental.stateless_fold_in(seed, 0)):
      # tf_dp's own sampler, as the noise generator calls it, and per leaf.
      guesses = noise.stateless_standard_normals(
          [t.shape for t in actual], base)
      for leaf, target in enumerate(actual):
        leaf_seed = tf.random.experimental.stateless_fold_in(base, leaf)
        guesses.append(noise.stateless_standard_normals([target.shape],
                                                        leaf_seed)[0])
      for guess in guesses:
        for target in actual:
          if guess.shape != target.shape:
            continue
          assert np.max(np.abs(guess.numpy() * Z * CLIP - target)) > MATCH, (
              f"checkpoint values {pair} regenerate the noise")


@pytest.mark.parametrize("K", KERAS)
def test_restore_then_continue_draws_new_noise(K, tmp_path):
  model, ckpt, x, y = _trained_one_step(K, tmp_path)
  first = _step(model, x, y)
  tf.train.Checkpoint(model=model, optimizer=model.optimizer).restore(
      ckpt).assert_existing_objects_matched()
  second = _step(model, x, y)  # Same data, same state: only noise differs.
  diff = np.concatenate([(a - b).ravel() * B / LR
                         for a, b in zip(first, second)])
  ratio = np.std(diff) / (Z * CLIP)
  assert INDEPENDENT[0] < ratio < INDEPENDENT[1], ratio


ATTACKER = r"""
import os, sys
flavor, ckpt, data, out = sys.argv[1:5]
import importlib.util
if flavor == "keras2" and importlib.util.find_spec("tf_keras") is not None:
  os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np
import tensorflow as tf
from tf_dp.keras import backend
from tests.keras import test_noise_secrecy as t
K = backend.module_for(flavor)
model = t._compiled(K)
model.build((None, 6))
tf.train.Checkpoint(model=model, optimizer=model.optimizer).restore(ckpt)
arrays = np.load(data)
np.savez(out, *t._step(model, arrays["x"], arrays["y"]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("K", KERAS)
def test_a_process_with_the_checkpoint_cannot_repeat_the_next_step(
    K, tmp_path):
  # The attacker replays the next step with the same data from the
  # checkpoint in a fresh process; without the noise key the result
  # differs from the real one by an independent noise draw.
  model, ckpt, x, y = _trained_one_step(K, tmp_path)
  real = _step(model, x, y)
  np.savez(tmp_path / "data.npz", x=x, y=y)
  out = subprocess.run(
      [sys.executable, "-c", ATTACKER, _flavor(K), ckpt,
       str(tmp_path / "data.npz"), str(tmp_path / "attack.npz")],
      capture_output=True, text=True, timeout=600, check=False,
      env=dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3"))
  assert out.returncode == 0, out.stderr[-3000:]
  attack = np.load(tmp_path / "attack.npz")
  replayed = [attack[f"arr_{i}"] for i in range(len(real))]
  diff = np.concatenate([(a - b).ravel() * B / LR
                         for a, b in zip(real, replayed)])
  ratio = np.std(diff) / (Z * CLIP)
  assert INDEPENDENT[0] < ratio < INDEPENDENT[1], ratio


@pytest.mark.parametrize("K", KERAS)
def test_saved_model_files_hold_no_noise_key(K, tmp_path):
  model, _, _, _ = _trained_one_step(K, tmp_path)
  if _flavor(K) == "keras3":
    path = str(tmp_path / "model.keras")  # Keras 3 saves optimizer state.
    model.save(path)
  else:
    path = str(tmp_path / "saved_model")
    model.save(path, save_format="tf")
  _assert_no_key_in_files(path)


@pytest.mark.parametrize("K", KERAS)
def test_secure_mode_trains_with_the_configured_noise(K):
  x, y = helpers.make_data("dense", 4 * B)
  model = _compiled(K, secure=True)
  noises = []
  for i in range(4):
    got, _ = _noise_of_next_step(model, x[i * B:(i + 1) * B],
                                 y[i * B:(i + 1) * B])
    noises.append(np.concatenate([g.ravel() for g in got]))
  # 4 x 53 values: sample stddev has sd 5%; [0.75, 1.25] is 5 sd.
  assert 0.75 < np.std(noises) / (Z * CLIP) < 1.25
  assert abs(np.corrcoef(noises[0], noises[1])[0, 1]) < 5 / math.sqrt(53)
  assert len(model.optimizer.ledger.to_dict()["samples"]) == 4


def test_secure_mode_with_a_custom_query_points_to_build_query():
  K = KERAS[0].values[0]
  query = tf_dp.GaussianSumQuery(CLIP, Z * CLIP)
  with pytest.raises(ValueError, match="build_query"):
    tf_dp.DPOptimizer(K.optimizers.SGD(LR), dp_query=query,
                      population_size=64, secure_mode=True)


@pytest.mark.parametrize("K", KERAS)
def test_secure_mode_refuses_jit_compile(K):
  x, y = helpers.make_data("dense", B)
  model = _compiled(K, secure=True, jit_compile=True)
  with pytest.raises(ValueError, match="jit_compile=False"):
    model.fit(x, y, batch_size=B, epochs=1, verbose=0)
