"""Tied embeddings and position embeddings on the fast path
(``tf_dp/keras/fast/embedding_rules.py``).

1. Certified norms of a ``ReversibleEmbedding`` called forward and in
   reverse (one variable, two uses): on crafted records (the reverse use
   cancelling the forward one, cancelling positions, magnitudes up to 1e9,
   huge, tiny) the squared norm is at least the exact float64 norm of the
   record's summed gradient (relative tolerance 1e-6), and removing a
   record moves the clipped sum by at most C (1 + 1e-4).
2. Models with a tied input/output embedding (a causal LM with per-token
   labels) or an untied one, and with a KerasHub ``PositionEmbedding``,
   take the same step as a per-example loop (``loop_reference``, 1e-5).

1.-2. are Keras 3's. 3. An Embedding fed repeated tokens, in both
flavours, has the clipped sum of tf.vectorized_map (1e-6).
"""

import numpy as np
import pytest
import tensorflow as tf

from tf_dp.dp_query import clipping
from tf_dp.keras import backend
from tf_dp.keras.fast import embedding_rules
from tf_dp.keras.fast import rules as rules_lib
from tf_dp.keras.fast import taps as taps_lib
from tf_dp.dp_query import GaussianSumQuery
from tests.keras import helpers
from tests.keras.fast import loop_reference
from tests.keras.fast.one_step import KERAS
from tests.keras.fast.one_step import clipped_sums_both_ways

K3 = backend.keras3_module()
REVERSIBLE_EMBEDDING = pytest.mark.skipif(
    K3 is None or not hasattr(K3.layers, "ReversibleEmbedding"),
    reason="ReversibleEmbedding is Keras 3's")
CLIP = 1.0
VOCAB, DIM, T, S = 7, 6, 8, 8
MODES = ("cancel_cross", "cancel_g", "huge", "tiny", "plain")


def _record(mode, rng, magnitude):
  """(ids [T], g [T, D], h [S, D], dl [S, V]) of one record."""
  noise = lambda *shape: rng.normal(size=shape)
  ids = rng.integers(0, VOCAB, size=T)
  g, h, dl = noise(T, DIM), noise(S, DIM), noise(S, VOCAB)
  if mode == "cancel_cross":  # dl^T h undoes onehot^T g: sum ~ 0.
    ids[:] = 3
    w = rng.normal(size=DIM)
    g = magnitude * np.broadcast_to(w, (T, DIM)) + noise(T, DIM)
    h = magnitude * np.broadcast_to(w, (S, DIM))
    dl = -np.eye(VOCAB)[np.full(S, 3)] + 1e-3 * noise(S, VOCAB)
  elif mode == "cancel_g":
    ids[:] = 1
    signs = np.where(np.arange(T) % 2 == 0, 1.0, -1.0)
    g = magnitude * signs[:, None] * rng.normal(size=DIM) + noise(T, DIM)
  elif mode in ("huge", "tiny"):
    scale = 1e15 if mode == "huge" else 1e-20
    g, h = scale * g, scale * h
  return ids, g, h, dl


def _exact_sq_norm(ids, g, h, dl):
  grad = np.zeros((VOCAB, DIM))
  np.add.at(grad, ids, g)
  grad += dl.T @ h
  return float(np.sum(grad * grad))


def _outputs(layer, rule, batch, drop=None):
  ids, g, h, dl = (np.stack(p) for p in zip(*batch))
  taps = [taps_lib.Tap(layer, (tf.constant(ids, tf.int32),), {}, None),
          taps_lib.Tap(layer, (tf.constant(h, tf.float32),),
                       {"reverse": True}, None)]
  state = rule.prepare_calls(layer, taps, [tf.constant(g, tf.float32),
                                           tf.constant(dl, tf.float32)],
                             len(batch))
  sq = rule.sq_norms(state)[0]
  keep = tf.math.is_finite(sq)
  if drop is not None:
    keep &= tf.range(len(batch)) != drop
  scale = clipping.scale_from_squared_norm(
      tf.where(keep, sq, tf.zeros_like(sq)), CLIP)
  scale = tf.where(keep, scale, tf.zeros_like(scale))
  return sq.numpy(), rule.clipped_sums(state, [scale], keep)[0].numpy()


@REVERSIBLE_EMBEDDING
@pytest.mark.parametrize("magnitude", [1e3, 1e6, 1e9])
def test_tied_norms_bound_every_record_and_one_record_moves_the_sum_by_c(
    magnitude):
  layer = K3.layers.ReversibleEmbedding(VOCAB, DIM)
  layer.build()
  rule = rules_lib.rule_for(layer)
  assert isinstance(rule, embedding_rules.ReversibleEmbeddingRule)
  rng = np.random.default_rng(int(magnitude) % 991)
  batch = [_record(mode, rng, magnitude) for mode in MODES]
  # float32 records, as the rule sees them.
  batch = [(i, *(np.asarray(p, np.float32).astype(np.float64)
                 for p in rest)) for i, *rest in batch]
  sq, total = _outputs(layer, rule, batch)
  for r, mode in enumerate(MODES):
    exact = _exact_sq_norm(*batch[r])
    if np.isfinite(sq[r]) and exact > 1e-30:
      assert sq[r] >= exact * (1 - 1e-6), (mode, sq[r], exact)
    _, without = _outputs(layer, rule, batch, drop=r)
    moved = np.sqrt(np.sum(np.square(np.asarray(total, np.float64)
                                     - np.asarray(without, np.float64))))
    assert moved <= CLIP * (1 + 1e-4), (mode, moved)


def _causal_lm(tie_weights, vocab=VOCAB, seq=6):
  L = K3.layers
  inputs = L.Input((seq,), dtype="int32")
  embedding = L.ReversibleEmbedding(
      vocab, DIM, tie_weights=tie_weights, name="tokens",
      embeddings_initializer=K3.initializers.RandomNormal(seed=1))
  h = embedding(inputs)
  h = L.Dense(DIM, activation="tanh",
              kernel_initializer=K3.initializers.GlorotUniform(seed=2))(h)
  return K3.Model(inputs, embedding(h, reverse=True))


@REVERSIBLE_EMBEDDING
@pytest.mark.parametrize("tie_weights", [True, False])
def test_reversible_embedding_lm_equals_loop(tie_weights):
  rng = np.random.default_rng(0)
  x = rng.integers(0, VOCAB, size=(4, 6)).astype("int32")
  y = np.roll(x, -1, axis=1)
  mask = (rng.random(size=(4, 6)) > 0.3).astype("float32")  # Padding.
  model = _causal_lm(tie_weights)
  plan = loop_reference.fast_step_matches_loop(
      K3, model, x, y, 0.5, sample_weight=mask)
  assert "ReversibleEmbeddingRule" in plan["tokens"], plan


@REVERSIBLE_EMBEDDING
def test_position_embedding_equals_loop():
  keras_hub = pytest.importorskip("keras_hub")
  L = K3.layers
  inputs = L.Input((5,), dtype="int32")
  h = L.Embedding(VOCAB, DIM)(inputs)
  position = keras_hub.layers.PositionEmbedding(
      8, initializer=K3.initializers.RandomNormal(seed=3))
  h = L.GlobalAveragePooling1D()(h + position(h))
  model = K3.Model(inputs, L.Dense(3)(h))
  rng = np.random.default_rng(1)
  x = rng.integers(0, VOCAB, size=(6, 5)).astype("int32")
  y = rng.integers(0, 3, size=6).astype("int32")
  plan = loop_reference.fast_step_matches_loop(K3, model, x, y, 0.5)
  assert "PositionEmbeddingRule" in plan[position.name], plan


@pytest.mark.parametrize("K", KERAS)
def test_embedding_with_repeated_tokens(K):
  model = helpers.build_model(K, "embedding")
  model.compile(loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  x = tf.constant([[1, 1, 2, 1, 3], [4, 4, 4, 4, 4], [0, 1, 2, 3, 4]])
  y = tf.constant([0, 1, 2])
  fast, slow = clipped_sums_both_ways(K, model, GaussianSumQuery(0.05, 0.0),
                                      x, y)
  for a, b in zip(tf.nest.flatten(fast), tf.nest.flatten(slow)):
    np.testing.assert_allclose(a, b, atol=1e-6)


def _classifier_on_untied_embedding(seq=6):
  """An untied ReversibleEmbedding called forward only (a classification
  head, as on a KerasHub Llama backbone): its ``reverse_embeddings`` has
  no gradient."""
  L = K3.layers
  inputs = L.Input((seq,), dtype="int32")
  embedding = L.ReversibleEmbedding(
      VOCAB, DIM, tie_weights=False, name="tokens",
      embeddings_initializer=K3.initializers.RandomNormal(seed=1))
  h = L.GlobalAveragePooling1D()(embedding(inputs))
  head = L.Dense(3, kernel_initializer=K3.initializers.GlorotUniform(seed=2))
  return K3.Model(inputs, head(h)), embedding


@REVERSIBLE_EMBEDDING
@pytest.mark.parametrize("method", ["fast", "vectorized"])
def test_untied_embedding_never_reversed_is_left_out_of_the_update(method):
  """Regression: the rule's empty reverse state gave every record a NaN
  norm (0 / 0), which dropped every record: the whole update was zero.
  Now, with no noise, the step equals the per-example loop (1e-5, clip 0.5
  against record norms ~1: every variable's norm and sum is that record's,
  the variable without a gradient adds nothing), and with noise
  ``reverse_embeddings`` keeps its value bit for bit, as under Keras,
  which leaves a variable without a gradient out of the update (a zero
  gradient would be noised and applied)."""
  rng = np.random.default_rng(4)
  x = rng.integers(0, VOCAB, size=(4, 6)).astype("int32")
  y = rng.integers(0, 3, size=4).astype("int32")
  loss = K3.losses.SparseCategoricalCrossentropy(from_logits=True)
  for noise in (0.0, 1.0):
    K3.utils.set_random_seed(0)
    model, embedding = _classifier_on_untied_embedding()
    expected = loop_reference.reference_update(model, loss, x, y, 0.5, 1.0)
    before = embedding.reverse_embeddings.numpy().copy()
    table = embedding.embeddings.numpy().copy()
    model = helpers.compile_dp(K3, model, population_size=4,
                               learning_rate=1.0, l2_norm_clip=0.5,
                               noise_multiplier=noise,
                               per_example_method=method)
    with pytest.warns(UserWarning, match="Gradients do not exist for "
                      "variables .*reverse_embeddings"):
      model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
    np.testing.assert_array_equal(embedding.reverse_embeddings.numpy(),
                                  before)
    if noise == 0.0:
      for v, e in zip(model.trainable_variables, expected):
        np.testing.assert_allclose(np.asarray(v.numpy(), np.float64), e,
                                   atol=1e-5, err_msg=v.path)
    assert not np.array_equal(embedding.embeddings.numpy(), table)
