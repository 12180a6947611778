"""Gaussian noise whose secret never enters a query's state.

A query's global state holds only a public **noise nonce**, int64
``[noise_seed or 0, draws]``. The noise itself is drawn by a ``NoiseGenerator``
in one of three modes:

* **default** (``noise_seed=None``): stateless normals (Box-Muller on
  Philox words, ``stateless_standard_normals``) from a seed derived from a **per-process key**: 128 bits from ``os.urandom``, held in
  ``tf.Variable``s of a plain Python object that no ``tf.Module`` or
  checkpoint references, so the key is in no checkpoint, SavedModel or
  ``.keras`` file (a function that captures it cannot be exported: TF refuses
  untracked resources). Every draw advances an in-process counter that a
  checkpoint restore cannot rewind, and folds in a per-call-site number, so
  no seed is used twice in a process, even after restoring an earlier state.
  A new process has a new key. There is one key per ``tf.distribute``
  strategy; the strategy creates the key variables, so the replicas of a
  ``MirroredStrategy`` share them and ``MultiWorkerMirroredStrategy``
  broadcasts the chief's key to the other workers when it initialises them
  (worker-to-worker traffic already carries gradients and must be trusted).
  In a ``tf.compat.v1`` graph (Estimator) each draw takes a fresh key from
  ``os.urandom`` through ``tf.numpy_function`` instead. Philox is not a
  cryptographically secure generator (and Philox-4x32's key is 64 bits):
  the noise is unpredictable to whoever lacks access to the process, and
  that is the whole guarantee. Noise is drawn at the precision of the sum
  it is added to (float64 normals for float64 sums, so they are not on the
  float32 grid; a float16 or bfloat16 sum is noised in float32 and rounded
  once). It is not hardened against floating-point attacks (Mironov 2012):
  ``secure_mode`` is.
* **fixed** (``noise_seed=int``, tests only, warns): the same sampler,
  seeded by ``nonce`` itself;
  reproducible and therefore removable by anyone who knows the int.
* **secure** (``secure_mode=True``): every bit comes from ``os.urandom``
  (the kernel's CSPRNG), read on the host through ``tf.numpy_function`` in
  float64; each coordinate is the sum of ``SECURE_SUMMANDS`` independent
  Box-Muller normals divided by ``sqrt(SECURE_SUMMANDS)``, the mitigation of
  Holohan & Braghin (ESORICS 2021) against floating-point attacks on
  textbook samplers (Mironov, CCS 2012, on Laplace; Jin et al., IEEE S&P
  2022, on Gaussians and DP-SGD); the noisy sum is formed in float64 and
  rounded once to the record dtype. Box-Muller has no value-dependent loop
  (Jin et al.'s timing attack exploits the loops of discrete samplers),
  though libm's log/cos/sin are not constant-time instructions. This
  narrows, but is not proven to close, the gap between a floating-point
  sampler and the real Gaussian that the accountant assumes. It runs on the
  host, so it cannot be compiled with XLA: it is refused under
  ``jit_compile=True``. Under a strategy spanning several workers, every
  worker draws, and replica 0's draw (the chief's) is sent to all in one
  more all-reduce of the noise's size, so the noise is added once per lot.
"""

import itertools
import math
import os
import threading
import warnings
import weakref
from typing import Any, List, Optional, Sequence

import numpy as np
import tensorflow as tf

from tf_dp.dp_query import eager_variables
from tf_dp.dp_query import strategy_context
from tf_dp.dp_query import xla_context
from tf_dp.dp_query.dp_query import Nest

# Independent normals summed per coordinate in secure mode (Holohan &
# Braghin 2021: sum n Gaussian samples, scaled by 1/sqrt(n)).
SECURE_SUMMANDS = 4

_XLA_ERROR = (
    "secure_mode=True draws its noise from os.urandom on the host through "
    "tf.numpy_function, which XLA cannot compile. Train without XLA: "
    "model.compile(..., jit_compile=False) or tf.function(jit_compile=False).")


def _urandom_int64(count):
  return np.frombuffer(os.urandom(8 * count), dtype=np.int64).copy()


class NoiseGenerator:
  """Adds N(0, stddev^2) noise; holds the mode, never a secret.

  Args:
    noise_seed: None (default) for the per-process secret key; an int for a
      reproducible draw (tests and debugging only; warns).
    secure_mode: True for noise from the OS CSPRNG with a floating-point
      hardened sampler (slower; not under XLA).

  Raises:
    ValueError: if secure_mode is not a bool, or is combined with noise_seed.
  """

  def __init__(self, noise_seed: Optional[int] = None,
               secure_mode: bool = False) -> None:
    if not isinstance(secure_mode, bool):
      raise ValueError(f"secure_mode must be True or False; got "
                       f"{secure_mode!r}.")
    if secure_mode and noise_seed is not None:
      raise ValueError(
          f"secure_mode=True draws from OS entropy and cannot be made "
          f"reproducible; got noise_seed={noise_seed!r}. Remove noise_seed.")
    if noise_seed is not None:
      noise_seed = int(noise_seed)
    self._noise_seed = noise_seed
    self._secure_mode = secure_mode

  @property
  def secure_mode(self) -> bool:
    return self._secure_mode

  def initial_nonce(self) -> tf.Tensor:
    """The public nonce ``[noise_seed or 0, 0]`` (int64) of a new state."""
    if self._noise_seed is not None:
      warnings.warn(
          "A fixed noise_seed makes the DP noise reproducible; anyone who "
          "knows it can remove the noise. Use it only for tests and "
          "debugging.", UserWarning, stacklevel=3)
    return tf.constant([self._noise_seed or 0, 0], dtype=tf.int64)

  def advance(self, nonce: tf.Tensor) -> tf.Tensor:
    """The nonce after one draw. Without a fixed seed its first entry is
    set to 0, which scrubs a key restored from an old checkpoint."""
    nonce = tf.convert_to_tensor(nonce, tf.int64)
    if self._noise_seed is None:
      return tf.stack([tf.zeros([], tf.int64), nonce[1] + 1])
    return nonce + tf.constant([0, 1], dtype=tf.int64)

  def add(self, structure: Nest, stddev: tf.Tensor, nonce: tf.Tensor,
          stream: int = 0) -> Nest:
    """Adds N(0, stddev^2) independently to every element of ``structure``.

    ``stream`` separates several draws made with one nonce (e.g. two sums
    of one query); it matters only for a fixed noise_seed.

    Precision: the noise is drawn at the precision of what it is added to:
    float64 normals (53-bit uniforms) for float64 leaves, float32 normals
    for float32 leaves; a 16-bit leaf (float16, bfloat16) gets float32
    noise added in float32 and the sum rounded once to 16 bits (the noise
    is never rounded to 16 bits on its own). Secure mode draws float64 for
    every leaf and rounds the noisy sum once.
    """
    leaves = [tf.convert_to_tensor(x) for x in tf.nest.flatten(structure)]
    if self._secure_mode:
      noised = [_add_secure_noise(x, stddev) for x in leaves]
    else:
      seed = (tf.convert_to_tensor(nonce, tf.int64)
              if self._noise_seed is not None else _secret_seed())
      seed = tf.random.experimental.stateless_fold_in(seed, stream)
      noised = list(leaves)
      for precision in (tf.float32, tf.float64):
        where = [i for i, x in enumerate(leaves)
                 if _noise_dtype(x.dtype) == precision]
        if not where:
          continue
        # float32 draws keep the seed of a float32-only structure.
        draws = stateless_standard_normals(
            [leaves[i].shape if leaves[i].shape.is_fully_defined()
             else tf.shape(leaves[i]) for i in where],
            seed if precision == tf.float32 else
            tf.random.experimental.stateless_fold_in(seed, _FLOAT64_STREAM),
            scale=stddev, dtype=precision)
        for i, draw in zip(where, draws):
          x = leaves[i]
          noised[i] = tf.cast(tf.cast(x, precision) + draw, x.dtype)
    return tf.nest.pack_sequence_as(structure, noised)


def _noise_dtype(dtype):
  """The precision noise for a leaf of ``dtype`` is drawn and added at."""
  return tf.float64 if dtype == tf.float64 else tf.float32


# Folded into the seed of the float64 draws of a structure.
_FLOAT64_STREAM = 64


# --- The default sampler ---

_TWO_PI = 2.0 * math.pi


def _box_muller_float64(count, seed, scale=None):
  """``count`` i.i.d. N(0, scale^2) float64 values: Box-Muller on 53-bit
  uniforms, each made of two 32-bit Philox words (27 + 26 bits), so the
  values are not confined to the float32 grid."""
  half = (count + 1) // 2
  words = tf.random.stateless_uniform([4, half], seed=seed, minval=None,
                                      maxval=None, dtype=tf.uint32)
  bits = [tf.cast(w, tf.float64) for w in
          (words[0] // 32, words[1] // 64, words[2] // 32, words[3] // 64)]
  u1 = (bits[0] * 2.0 ** 26 + bits[1] + 0.5) * (2.0 ** -53)  # in (0, 1)
  u2 = (bits[2] * 2.0 ** 26 + bits[3]) * (2.0 ** -53)        # in [0, 1)
  radius = tf.sqrt(-2.0 * tf.math.log(u1))
  if scale is not None:
    radius *= tf.cast(scale, tf.float64)
  angle = _TWO_PI * u2
  both = tf.concat([radius * tf.cos(angle), radius * tf.sin(angle)], 0)
  if isinstance(count, int) and count % 2 == 0:
    return both
  return both[:count]


def _box_muller_float32(count, seed, scale=None):
  """``count`` i.i.d. N(0, scale^2) float32 values (Box-Muller on 32-bit
  words; ``scale`` None for 1).

  Each pair of outputs takes two 32-bit words of Philox (stateless, keyed
  by ``seed``): ``u1 = (w1 + 1/2) 2^-32`` in (0, 1] and angle ``2 pi w2
  2^-32``; ``r = sqrt(-2 log u1)``; outputs ``r cos``, ``r sin``. The
  transcendental functions are TensorFlow's vectorised kernels, so this is
  about twice as fast on a CPU as ``tf.random.stateless_normal`` (whose
  per-element Box-Muller is scalar), and its tail reaches ``r = 6.76``
  (``u1 >= 2^-33``) where ``stateless_normal`` clamps ``u1`` at 1e-7
  (``r <= 5.68``). Like every floating-point sampler it is not hardened
  against floating-point attacks; ``secure_mode`` is.
  """
  half = (count + 1) // 2
  words = tf.random.stateless_uniform([2, half], seed=seed, minval=None,
                                      maxval=None, dtype=tf.uint32)
  u1 = (tf.cast(words[0], tf.float32) + 0.5) * (2.0 ** -32)
  angle = tf.cast(words[1], tf.float32) * (_TWO_PI * 2.0 ** -32)
  radius = tf.sqrt(-2.0 * tf.math.log(u1))
  if scale is not None:
    radius *= tf.cast(scale, tf.float32)
  both = tf.concat([radius * tf.cos(angle), radius * tf.sin(angle)], 0)
  if isinstance(count, int) and count % 2 == 0:
    return both
  return both[:count]


def stateless_standard_normals(
    shapes: Sequence[Any], seed: tf.Tensor, scale: Optional[tf.Tensor] = None,
    dtype: tf.DType = tf.float32) -> List[tf.Tensor]:
  """Independent N(0, 1) tensors of the given shapes, from one stateless
  ``seed`` (int64 ``[2]``): the default mode's sampler. With ``scale``,
  N(0, scale^2) (the same draw, multiplied once by ``scale``). ``dtype``
  float32 (32-bit uniforms) or float64 (53-bit uniforms).

  One draw serves every shape (a structure's leaves are noised with one
  batch of Philox words and one set of kernels, not one per leaf).
  """
  if not shapes:
    return []
  box_muller = (_box_muller_float64 if tf.as_dtype(dtype) == tf.float64
                else _box_muller_float32)
  static = [_static_shape(s) for s in shapes]
  if all(s is not None for s in static):
    sizes = [int(np.prod(s, dtype=np.int64)) for s in static]
    flat = box_muller(sum(sizes), seed, scale)
    parts = tf.split(flat, sizes) if len(sizes) > 1 else [flat]
    return [tf.reshape(p, s) for p, s in zip(parts, static)]
  # A shape known only at run time: one draw per shape, seeds folded in.
  out = []
  for i, shape in enumerate(shapes):
    shape = tf.convert_to_tensor(shape, tf.int32)
    draw = box_muller(
        tf.reduce_prod(shape), tf.random.experimental.stateless_fold_in(
            seed, i), scale)
    out.append(tf.reshape(draw, shape))
  return out


def _static_shape(shape):
  """``shape`` as a list of ints, or None if only known at run time."""
  if isinstance(shape, tf.TensorShape):
    return shape.as_list() if shape.is_fully_defined() else None
  if tf.is_tensor(shape):
    value = tf.get_static_value(shape)
    return None if value is None else [int(d) for d in value]
  return [int(d) for d in shape]


# --- The per-process secret key (default mode) ---


class _ProcessKey:
  """A secret key and a draw counter in variables no checkpoint can reach.

  A plain object (not ``tf.Module``/``Trackable``) kept only in this
  module's ``_KEYS``: dependency tracking never finds its variables.
  """

  def __init__(self):
    self.key = tf.Variable(_urandom_int64(2), trainable=False,
                           name="tf_dp_process_noise_key")
    # ONLY_FIRST_REPLICA: a draw made in replica context advances the
    # counter once per step, and every replica then draws the same noise.
    self.draws = tf.Variable(
        tf.constant(0, tf.int64), trainable=False,
        name="tf_dp_process_noise_draws",
        aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)

  def next_seed(self, site):
    """A seed used by no other draw of this process."""
    draw = self.draws.assign_add(1)
    seed = tf.random.experimental.stateless_fold_in(
        self.key.read_value(), tf.convert_to_tensor(draw, tf.int64))
    return tf.random.experimental.stateless_fold_in(seed, site)


_KEYS: "weakref.WeakKeyDictionary[Any, _ProcessKey]" = (
    weakref.WeakKeyDictionary())  # tf.distribute strategy -> _ProcessKey
_KEYS_LOCK = threading.Lock()
_SITES = itertools.count(1)  # One number per traced (or eager) draw.


def _process_key():
  """This process's key for the current strategy (created on first use)."""
  strategy = tf.distribute.get_strategy()
  with _KEYS_LOCK:
    key = _KEYS.get(strategy)
    if key is None:
      key = _KEYS[strategy] = _ProcessKey()
    return key


def create_process_key() -> None:
  """Creates this process's secret noise key for the current
  ``tf.distribute`` strategy, unless it exists (the key the first draw
  would otherwise create; nothing in a tf.compat.v1 graph, which draws from
  os.urandom).

  The key is created eagerly, outside the variable capture of any
  ``tf.function`` being traced (``eager_variables.creation_scope``, as the
  first draw creates it too), so no function is traced twice for it;
  creating it here, with the rest of the DP state, makes it exist before
  the training step is traced. The key's secrecy and use are unchanged: it
  stays out of every checkpoint.
  """
  with eager_variables.creation_scope():
    if tf.executing_eagerly():
      _process_key()


def _os_entropy_seed():
  seed = tf.numpy_function(lambda: _urandom_int64(2), [], tf.int64)
  seed.set_shape([2])
  return seed


def _secret_seed():
  """A fresh secret seed: from the process key in eager and ``tf.function``
  code (XLA included); from os.urandom per draw in a tf.compat.v1 graph."""
  with eager_variables.creation_scope():
    key = _process_key() if tf.executing_eagerly() else None
  if key is None:
    return _os_entropy_seed()
  return key.next_seed(next(_SITES))


# --- Secure mode ---


def _box_muller(count):
  """``count`` standard normals from os.urandom bits (float64, 53-bit
  uniforms; no rejection step, so constant work per value)."""
  pairs = (count + 1) // 2
  bits = np.frombuffer(os.urandom(16 * pairs), dtype=np.uint64) >> 11
  u1 = (bits[:pairs] + 1.0) * 2.0 ** -53   # in (0, 1]: log is finite.
  u2 = bits[pairs:] * 2.0 ** -53           # in [0, 1).
  radius = np.sqrt(-2.0 * np.log(u1))
  angle = 2.0 * math.pi * u2
  return np.concatenate([radius * np.cos(angle),
                         radius * np.sin(angle)])[:count]


def secure_standard_normal(count: tf.Tensor) -> tf.Tensor:
  """``count`` N(0, 1) values (float64): the sum of SECURE_SUMMANDS
  independent Box-Muller normals over sqrt(SECURE_SUMMANDS). Summands of one
  coordinate never share uniforms: the two outputs of one Box-Muller pair
  share r and theta (Holohan & Braghin note cos t + sin t = sqrt(2) cos(t -
  pi/4)), so their sum would be no sum of independent draws."""
  count = int(count)
  total = np.zeros(count)
  for _ in range(SECURE_SUMMANDS):
    total += _box_muller(count)
  return total / math.sqrt(SECURE_SUMMANDS)


def _refuse_unsupported_secure_context():
  if xla_context.in_xla_context():
    raise ValueError(_XLA_ERROR)


def _first_replicas_draw(draw: tf.Tensor) -> tf.Tensor:
  """Under a strategy spanning several workers, replica 0's ``draw`` on
  every worker (one all-reduce of ``draw``'s size, where only replica 0
  adds anything); ``draw`` itself otherwise (one host draws once)."""
  strategy = tf.distribute.get_strategy()
  if strategy_context.strategy_workers(strategy) == 1:
    return draw

  def first_only(value):
    replica = tf.distribute.get_replica_context().replica_id_in_sync_group
    return tf.where(tf.equal(replica, 0), value, tf.zeros_like(value))

  if tf.distribute.in_cross_replica_context():
    per_replica = strategy.extended.call_for_each_replica(
        first_only, args=(draw,))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica,
                           axis=None)
  return tf.distribute.get_replica_context().all_reduce(
      tf.distribute.ReduceOp.SUM, first_only(draw))


def _add_secure_noise(x, stddev):
  _refuse_unsupported_secure_context()
  draw = tf.numpy_function(secure_standard_normal, [tf.size(x)], tf.float64)
  draw = _first_replicas_draw(tf.reshape(draw, tf.shape(x)))
  noised = tf.cast(x, tf.float64) + draw * tf.cast(stddev, tf.float64)
  return tf.cast(noised, x.dtype)
