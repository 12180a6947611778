"""Certified norms (``tf_dp/keras/fast/linear.py``): on inputs an adversary
crafts, every fast rule's norm bounds what a record adds to the clipped sum.

Each case feeds one layer's taps (its input x and output gradient g) to the
layer's rule. Records are crafted so that their position terms cancel
(rows alternating +M w and -M w plus a small random part, M up to 1e9: a
float32 ghost norm of such a record is zero or negative while its gradient
is not), or are huge (1e15) or tiny (1e-20) or ordinary, over sequences of
up to 256 positions. Two properties for every record:

1. the rule's squared norm is at least the exact squared norm of the
   record's gradient, computed in float64 by a float64 copy of the layer
   (relative tolerance 1e-6: the float64 reference's own rounding);
2. removing the record moves the float32 clipped sum (scales ``min(1, C /
   norm)``, as ``GaussianSumQuery`` gives them) by at most C (1 + 1e-4: the
   float32 rounding of the other records' terms).
Before the norms were certified, property 2 failed by factors up to 1e5.
"""

import numpy as np
import pytest
import tensorflow as tf

from tf_dp.dp_query import clipping
from tf_dp.keras.fast import embedding_rules
from tf_dp.keras.fast import linear
from tf_dp.keras.fast import rules as rules_lib
from tf_dp.keras.fast import taps as taps_lib
from tests.keras import helpers
from tests.keras.fast import loop_reference

KERAS = helpers.keras_modules()
CLIP = 1.0
MODES = ("cancel_g", "cancel_x", "huge", "tiny", "plain")


def _cases(K):
  """name -> (layer, input shape per record, input dtype, indices of the
  variables whose norms are certified bounds: the others' per-record
  gradients are materialised in float32 and added to the sum as they are,
  so their norms are exactly those of what the record adds)."""
  L = K.layers
  return {
      "dense_one_position": (L.Dense(5), (7,), "float32", [0]),
      "dense_ghost": (L.Dense(48), (6, 40), "float32", [0]),
      "dense_materialised": (L.Dense(3), (256, 4), "float32", [0]),
      "einsum_positions": (L.EinsumDense("abc,cd->abd", (16, 24),
                                         bias_axes="d"), (16, 20), "float32",
                           [0]),
      "einsum_two_contracted": (L.EinsumDense("abcd,cde->abe", (12, 30)),
                                (12, 3, 10), "float32", [0]),
      # 32 positions: per-token rows; 8: the ghost norm (both certified).
      "embedding": (L.Embedding(6, 8), (32,), "int32", [0]),
      "embedding_ghost": (L.Embedding(6, 8), (8,), "int32", [0]),
      "conv1d_ghost": (L.Conv1D(40, 3), (12, 30), "float32", [0]),
      "conv2d_patches": (L.Conv2D(4, 3, padding="same"), (8, 8, 3),
                         "float32", [0]),
      "conv2d_one_channel": (L.Conv2D(6, 4, strides=2, padding="same"),
                             (16, 16, 1), "float32", []),
      "depthwise": (L.DepthwiseConv2D(3, padding="same"), (8, 8, 4),
                    "float32", [0]),
      "separable": (L.SeparableConv2D(5, 3), (8, 8, 3), "float32", [0, 1]),
      "transpose": (L.Conv2DTranspose(3, 3, strides=2, padding="same"),
                    (5, 5, 4), "float32", [0]),
      "layer_norm": (L.LayerNormalization(), (9, 6), "float32", []),
  }


NAMES = ("dense_one_position", "dense_ghost", "dense_materialised",
         "einsum_positions", "einsum_two_contracted", "embedding",
         "embedding_ghost",
         "conv1d_ghost", "conv2d_patches", "conv2d_one_channel", "depthwise",
         "separable", "transpose", "layer_norm")


def _alternating(shape, rng, magnitude):
  """Rows of the last axis alternating +M w and -M w (an even count of
  positions cancels exactly) plus a small random part."""
  w = rng.normal(size=shape[-1])
  positions = int(np.prod(shape[:-1]))
  signs = np.where(np.arange(positions) % 2 == 0, 1.0, -1.0)
  rows = magnitude * signs[:, None] * w[None, :] + rng.normal(
      size=(positions, shape[-1]))
  return rows.reshape(shape)


def _record(shape, mode, rng, magnitude, integer):
  if integer:
    return rng.integers(0, 2 if mode == "cancel_g" else 6, size=shape)
  if mode == "cancel_x":
    return _alternating(shape, rng, magnitude)
  if mode == "cancel_g":  # All positions alike: equal rows, equal patches.
    return np.broadcast_to(rng.normal(size=shape[-1]), shape).copy()
  scale = {"huge": 1e15, "tiny": 1e-20}.get(mode, 1.0)
  return scale * rng.normal(size=shape)


def _out_grad(shape, mode, rng, magnitude):
  if mode == "cancel_g":
    return _alternating(shape, rng, magnitude)
  scale = {"huge": 1e15, "tiny": 1e-20}.get(mode, 1.0)
  return scale * rng.normal(size=shape)


def _float64_copy(layer, x):
  config = dict(layer.get_config(), dtype="float64")
  if "activation" in config:
    config["activation"] = "linear"
  copy = type(layer).from_config(config)
  copy(tf.constant(x[:1]) if x.dtype.kind == "i" else
       tf.constant(x[:1], tf.float64))
  copy.set_weights([np.asarray(w, np.float64) for w in layer.get_weights()])
  return copy


def _exact_sq_norms(layer, rule, x, g):
  """``[records, variables]`` float64 squared norms, one record at a time."""
  copy = _float64_copy(layer, x)
  index = [next(i for i, w in enumerate(layer.trainable_weights) if w is v)
           for v in rule.variables(layer)]
  variables = [copy.trainable_weights[i] for i in index]
  out = []
  for r in range(len(x)):
    xr = tf.constant(x[r:r + 1]) if x.dtype.kind == "i" else tf.constant(
        x[r:r + 1], tf.float64)
    with tf.GradientTape() as tape:
      z = copy(xr)
    grads = tape.gradient(z, variables,
                          output_gradients=tf.constant(g[r:r + 1], tf.float64))
    out.append([float(np.sum(np.square(tf.convert_to_tensor(gr).numpy())))
                for gr in grads])
  return np.asarray(out)


def _rule_outputs(layer, rule, x, g, drop=None):
  """The rule's squared norms and clipped sums; ``drop`` removes a record.
  ``g`` a list: the layer is called once per element, on ``x`` each time,
  with that output gradient (a shared layer)."""
  tap = taps_lib.Tap(layer, (tf.constant(x),), {}, None)
  if isinstance(g, list):
    state = rule.prepare_calls(layer, [tap] * len(g), [
        tf.constant(gi, tf.float32) for gi in g], len(x))
  else:
    state = rule.prepare(layer, tap, tf.constant(g, tf.float32), len(x))
  sq = rule.sq_norms(state)
  total = tf.add_n(sq)
  keep = tf.math.is_finite(total)
  if drop is not None:
    keep &= tf.range(len(x)) != drop
  scale = clipping.scale_from_squared_norm(
      tf.where(keep, total, tf.zeros_like(total)), CLIP)
  scale = tf.where(keep, scale, tf.zeros_like(scale))
  sums = rule.clipped_sums(state, [scale] * len(sq), keep)
  return np.stack([s.numpy() for s in sq], 1), [s.numpy() for s in sums]


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("magnitude", [1e3, 1e6, 1e9])
def test_norms_bound_every_record_and_one_record_moves_the_sum_by_c(
    K, name, magnitude):
  layer, shape, dtype, certified = _cases(K)[name]
  rng = np.random.default_rng(int(magnitude) % 1000 + len(name))
  integer = dtype == "int32"
  x = np.stack([_record(shape, mode, rng, magnitude, integer)
                for mode in MODES]).astype(dtype)
  if layer.__class__.__name__ == "LayerNormalization" or integer:
    layer(tf.constant(x[:1]))
  else:
    layer(tf.constant(x[:1], tf.float32))
  z = layer(tf.constant(x) if integer else tf.constant(x, tf.float32))
  g = np.stack([_out_grad(z.shape[1:], mode, rng, magnitude)
                for mode in MODES]).astype("float32")
  rule = rules_lib.rule_for(layer)
  assert rule is not None, name
  sq, sums = _rule_outputs(layer, rule, x, g)
  exact = _exact_sq_norms(layer, rule, x, g)
  # Property 1, for the certified variables of every record whose norm is
  # finite (the others are dropped: they add nothing) and whose gradient is
  # within float32's range (below 1e-30 its float32 terms underflow).
  for i in certified:
    check = np.isfinite(sq.sum(1)) & (exact[:, i] > 1e-30)
    np.testing.assert_array_less(
        (exact[:, i] * (1 - 1e-6))[check], sq[check, i],
        err_msg=f"{name}: a norm below the exact one")
  # Property 2, record by record.
  for r, mode in enumerate(MODES):
    _, without = _rule_outputs(layer, rule, x, g, drop=r)
    moved = np.sqrt(sum(np.sum(np.square(
        np.asarray(a, np.float64) - np.asarray(b, np.float64)))
                        for a, b in zip(sums, without)))
    assert moved <= CLIP * (1 + 1e-4), (name, mode, moved)


@pytest.mark.parametrize("K", KERAS)
def test_microbatched_records_are_certified(K):
  # Two examples per record: a record's rows are both examples' positions.
  layer = K.layers.Dense(30)
  rng = np.random.default_rng(3)
  x = np.concatenate([_alternating((2, 6, 20), rng, 1e8),
                      rng.normal(size=(2, 6, 20))]).astype("float32")
  layer(tf.constant(x[:1]))
  g = np.concatenate([np.ones((2, 6, 30)),
                      rng.normal(size=(2, 6, 30))]).astype("float32")
  rule = rules_lib.rule_for(layer)
  tap = taps_lib.Tap(layer, (tf.constant(x),), {}, None)
  state = rule.prepare(layer, tap, tf.constant(g), 2)
  sq = tf.add_n(rule.sq_norms(state)).numpy()
  copy = _float64_copy(layer, x)
  exact = []
  for r in range(2):
    with tf.GradientTape() as tape:
      z = copy(tf.constant(x[2 * r:2 * r + 2], tf.float64))
    grads = tape.gradient(z, copy.trainable_weights,
                          output_gradients=tf.constant(g[2 * r:2 * r + 2],
                                                       tf.float64))
    exact.append(sum(float(np.sum(np.square(gr.numpy()))) for gr in grads))
  assert np.all(sq >= np.asarray(exact) * (1 - 1e-6)), (sq, exact)


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("magnitude", [1e3, 1e9])
def test_a_shared_layer_is_certified_for_the_sum_of_its_calls(K, magnitude):
  # Call 2 undoes call 1 (same inputs, output gradients negated plus a
  # small part): each call's gradient is huge, their sum is not.
  layer = K.layers.Dense(12)
  rng = np.random.default_rng(int(magnitude) % 97)
  x = rng.normal(size=(4, 8, 10)).astype("float32")
  x[0] *= magnitude
  layer(tf.constant(x[:1]))
  g1 = rng.normal(size=(4, 8, 12)).astype("float32")
  g2 = (-g1 + rng.normal(size=g1.shape)).astype("float32")
  rule = rules_lib.rule_for(layer)
  outputs = lambda drop=None: _rule_outputs(layer, rule, x, [g1, g2], drop)
  sq, sums = outputs()
  x64 = x.astype(np.float64)
  g64 = g1.astype(np.float64) + g2.astype(np.float64)
  exact_kernel = np.sum(np.square(np.einsum("rtk,rtc->rkc", x64, g64)),
                        (1, 2))
  np.testing.assert_array_less(exact_kernel * (1 - 1e-6), sq[:, 0])
  for r in range(4):
    _, without = outputs(drop=r)
    moved = np.sqrt(sum(np.sum(np.square(np.asarray(a, np.float64)
                                         - np.asarray(b, np.float64)))
                        for a, b in zip(sums, without)))
    assert moved <= CLIP * (1 + 1e-4), (r, moved)


@pytest.mark.parametrize("K", KERAS)
def test_per_layer_fallback_norms_bound_what_each_record_adds(K):
  # The fallback (LocalVectorizedRule) materialises each record's gradient
  # and adds it as it is: its norm must not be below that tensor's exact
  # norm. A float32 sum of squares rounds below it for about half of the
  # records (64 records of 300 PReLU slopes: ratio of the computed to the
  # exact squared norm down to 1 - 1e-7 before the float64 sum).
  layer = K.layers.PReLU()
  rng = np.random.default_rng(11)
  x = (rng.normal(size=(64, 300)) * 10.0 ** rng.integers(
      -3, 4, size=(64, 300))).astype("float32")
  layer(tf.constant(x[:1]))
  g = rng.normal(size=x.shape).astype("float32")
  rule = rules_lib.LocalVectorizedRule(layer.call)
  tap = taps_lib.Tap(layer, (tf.constant(x),), {}, None)
  state = rule.prepare(layer, tap, tf.constant(g), len(x))
  sq = rule.sq_norms(state)[0].numpy().astype(np.float64)
  added = np.asarray(state.per_record[0], np.float64).reshape(len(x), -1)
  exact = np.sum(np.square(added), 1)
  assert np.all(sq >= exact), np.min(sq / exact)


def test_embedding_norm_forms_agree_with_the_exact_norm():
  # Per-token rows (long sequences, or a length unknown at trace time) and
  # the ghost norm give each record's gradient norm: against a float64
  # numpy reference, on ids that repeat, are negative or extreme (keys of
  # (record, token) must not collide), within the certificates' slack.
  rng = np.random.default_rng(3)
  records, positions, dim = 5, 40, 6
  ids = rng.integers(0, 7, size=(records, positions)).astype("int32")
  ids[1, :3] = [-1, 2 ** 31 - 1, -2 ** 31]
  ids[2] = 4  # One token throughout: every row adds to one.
  g = rng.normal(size=(records, positions, dim)).astype("float32")
  exact = []
  for r in range(records):
    rows = {}
    for t in range(positions):
      rows[ids[r, t]] = rows.get(ids[r, t], 0.0) + g[r, t].astype(np.float64)
    exact.append(sum(float(np.sum(v * v)) for v in rows.values()))
  exact = np.asarray(exact)
  long_form = embedding_rules.embedding_sq_norms(
      tf.constant(ids), tf.constant(g), records).numpy()
  unknown = tf.function(
      lambda i, v: embedding_rules.embedding_sq_norms(i, v, records),
      input_signature=[tf.TensorSpec([None, None], tf.int32),
                       tf.TensorSpec([None, None, dim], tf.float32)])(
                           tf.constant(ids), tf.constant(g)).numpy()
  ghost = embedding_rules._ghost_sq_bound(tf.constant(ids),
                                         tf.constant(g))[0].numpy()
  rows_form = embedding_rules._token_rows_sq_bound(
      tf.constant(ids), tf.constant(g))[0].numpy()
  for value in (long_form, unknown):
    assert np.all(value >= exact)
    np.testing.assert_allclose(value, exact, rtol=2e-3)  # u (mT)^1.5 slack.
  np.testing.assert_allclose(rows_form, exact, rtol=1e-9)
  np.testing.assert_allclose(ghost, exact, rtol=1e-9)
  assert np.all(rows_form >= exact) and np.all(ghost >= exact)


@pytest.mark.parametrize("K", KERAS)
def test_long_sequence_embedding_step_equals_loop(K):
  # 24 positions per example (per-token rows, not the ghost norm), tokens
  # repeating within examples: one fit step equals a per-example loop.
  L = K.layers
  inputs = L.Input((24,), dtype="int32")
  h = L.Embedding(9, 4, embeddings_initializer=K.initializers.RandomNormal(
      seed=1))(inputs)
  h = L.GlobalAveragePooling1D()(h)
  model = K.Model(inputs, L.Dense(3, kernel_initializer=(
      K.initializers.GlorotUniform(seed=2)))(h))
  rng = np.random.default_rng(4)
  x = rng.integers(0, 9, size=(6, 24)).astype("int32")
  y = rng.integers(0, 3, size=6).astype("int32")
  plan = loop_reference.fast_step_matches_loop(K, model, x, y, 0.05)
  assert any("EmbeddingRule" in path for path in plan.values()), plan


def test_ghost_norm_is_chosen_up_to_the_cost_tie():
  # 2 t^2 (k + c) against t k c: equal at t = 128 for k = c = 512.
  assert linear.use_ghost_sizes(128, 512, 512)
  assert not linear.use_ghost_sizes(129, 512, 512)
  assert linear.use_ghost_sizes(32, 128, 128)
  assert not linear.use_ghost_sizes(33, 128, 128)


def test_ghost_mass_from_gram_diagonals_bounds_the_row_mass():
  # U = sum_t |a_t| |b_t| is read off the float64 Gram matrices' diagonals:
  # never below the float64 row computation, and equal to it to rounding,
  # for huge, tiny and ordinary rows.
  rng = np.random.default_rng(3)
  for scale in (1e15, 1e-20, 1.0):
    a = tf.constant(scale * rng.normal(size=[3, 7, 5]), tf.float32)
    b = tf.constant(rng.normal(size=[3, 7, 4]), tf.float32)
    _, mass = linear.ghost_sq_bound(a, b)
    a64, b64 = a.numpy().astype(np.float64), b.numpy().astype(np.float64)
    rows = np.sum(np.linalg.norm(a64, axis=2) * np.linalg.norm(b64, axis=2),
                  1)
    assert np.all(mass.numpy() >= rows)
    np.testing.assert_allclose(mass.numpy(), rows, rtol=1e-12)


@pytest.mark.parametrize("static_rows", [True, False])
def test_records_without_rows_have_norm_zero(static_rows):
  """A rule's state with no positions (an untied ReversibleEmbedding never
  called in reverse) holds a zero gradient: its certified norm is exactly
  0 (it was 0 / 0 = NaN, which dropped every record, so the whole update
  was zero), with the row count known at trace time or only at run time."""
  h, dl = tf.zeros([3, 0, 4]), tf.zeros([3, 0, 5])
  np.testing.assert_array_equal(linear.kernel_sq_norms(h, dl, 3), [0, 0, 0])
  rows = 0 if static_rows else tf.constant(0)
  zeros = tf.zeros([3], tf.float64)
  np.testing.assert_array_equal(
      linear.certified_sq_norms(zeros, zeros, rows, 3), [0, 0, 0])
