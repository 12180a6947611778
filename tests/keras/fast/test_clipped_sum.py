"""Which layers the fast path taps (``tf_dp/keras/fast/clipped_sum.py``):
containers are tapped through their sublayers with no registration, and a
container that reads a sublayer's weights itself is refused (the taps
would miss those gradient terms), never trained on a partial gradient.

Comparisons are one noiseless step against a loop over examples
(``loop_reference``, tolerance 1e-5 stated there), or the clipped sum of
random models, per-layer and adaptive queries, microbatches and non-finite
examples against tf.vectorized_map (``one_step.clipped_sums_both_ways``);
the per-layer fallback refuses layers that break under vectorized_map.
"""

import numpy as np
import pytest
import tensorflow as tf

from tf_dp.dp_query import GaussianSumQuery
from tf_dp.dp_query import NestedQuery
from tf_dp.dp_query import QuantileAdaptiveClipSumQuery
from tf_dp.keras import backend
from tf_dp.keras.fast import clipped_sum
from tf_dp.keras.fast import rules
from tests.keras import helpers
from tests.keras.fast import loop_reference
from tests.keras.fast.one_step import _attention_model
from tests.keras.fast.one_step import _data
from tests.keras.fast.one_step import _sequential
from tests.keras.fast.one_step import clipped_sums_both_ways

KERAS = helpers.keras_modules()
CLIP = 0.5
FALLBACK = "local vectorized_map"


def _block_class(K):
  class Block(K.layers.Layer):
    """A transformer block owning no variables itself."""

    def __init__(self, width, attention=True, read_kernel=False, **kwargs):
      super().__init__(**kwargs)
      init = K.initializers.GlorotUniform(seed=7)
      self.attention = (K.layers.MultiHeadAttention(
          2, width // 2, kernel_initializer=init) if attention else None)
      self.dense = K.layers.Dense(width, activation="relu",
                                  kernel_initializer=init)
      self.norm = K.layers.LayerNormalization()
      self.read_kernel = read_kernel

    def call(self, x):
      if self.attention is not None:
        x = x + self.attention(x, x)
      h = self.norm(x)
      h = h + self.dense(h)
      if self.read_kernel:  # A direct read no tap of self.dense sees.
        h = h + tf.reduce_mean(tf.convert_to_tensor(self.dense.kernel))
      return h
  return Block


def _model(K, block, seq=6, vocab=12):
  inputs = K.layers.Input((seq,), dtype="int32")
  h = K.layers.Embedding(vocab, 8, embeddings_initializer=(
      K.initializers.RandomNormal(seed=3)))(inputs)
  h = K.layers.GlobalAveragePooling1D()(block(h))
  return K.Model(inputs, K.layers.Dense(3, kernel_initializer=(
      K.initializers.GlorotUniform(seed=5)))(h))


def _tokens(n=6, seq=6, vocab=12):
  rng = np.random.default_rng(0)
  x = rng.integers(0, vocab, size=(n, seq)).astype("int32")
  return x, (x[:, 0] % 3).astype("int32")


@pytest.mark.parametrize("K", KERAS)
def test_containers_are_tapped_through_their_sublayers(K):
  block = _block_class(K)(8, name="block")
  x, y = _tokens()
  plan = loop_reference.fast_step_matches_loop(K, _model(K, block), x, y,
                                               CLIP)
  assert plan["block"].startswith("composite"), plan
  assert not [n for n, p in plan.items() if FALLBACK in p], plan
  import tf_dp  # pylint: disable=g-import-not-at-top
  public = {name: (cls, path) for name, cls, path in
            tf_dp.keras.clipping_plan(block)}
  assert public[block.dense.name] == ("Dense", "fast rule (DenseRule)")
  assert public[block.attention.name][1].startswith("composite"), public


@pytest.mark.parametrize("K", KERAS)
def test_a_weight_read_outside_its_layer_is_refused(K):
  block = _block_class(K)(8, attention=False, read_kernel=True)
  x, y = _tokens()
  loss = K.losses.SparseCategoricalCrossentropy(from_logits=True)
  model = loop_reference.compile_fast(K, _model(K, block), 6, loss, CLIP,
                                      noise_multiplier=0.5)
  with pytest.raises(ValueError, match="read outside the call of the layer"):
    model.fit(x, y, batch_size=6, epochs=1, verbose=0)


def _shared_layers_model(K):
  """One Dense applied to two inputs and to its own output, one Embedding
  and one LayerNormalization used twice: each variable used several times
  per forward pass."""
  L = K.layers
  init = lambda seed: K.initializers.GlorotUniform(seed=seed)
  tokens = L.Input((5,), dtype="int32")
  features = L.Input((5, 4))
  embedding = L.Embedding(12, 4, embeddings_initializer=init(1),
                          name="shared_embedding")
  dense = L.Dense(4, activation="tanh", kernel_initializer=init(2),
                  bias_initializer=init(3), name="shared_dense")
  norm = L.LayerNormalization(name="shared_norm")
  h = norm(dense(embedding(tokens)) + dense(dense(features)))
  h = norm(h + embedding(L.Lambda(lambda t: (t + 1) % 12)(tokens)))
  h = L.GlobalAveragePooling1D()(h)
  return K.Model([tokens, features], L.Dense(3, kernel_initializer=init(4))(h))


@pytest.mark.parametrize("K", KERAS)
def test_shared_layers_sum_their_uses(K):
  rng = np.random.default_rng(1)
  x = [rng.integers(0, 12, size=(6, 5)).astype("int32"),
       rng.normal(size=(6, 5, 4)).astype("float32")]
  y = rng.integers(0, 3, size=6).astype("int32")
  plan = loop_reference.fast_step_matches_loop(K, _shared_layers_model(K), x,
                                               y, CLIP)
  for name in ("shared_embedding", "shared_dense", "shared_norm"):
    assert plan[name].startswith("fast rule"), plan


def test_an_einsum_subclass_with_its_own_call_is_refused_with_the_fix():
  """No rule for a subclass that computes something else; the per-layer
  fallback would run it under tf.vectorized_map (TF 2.21 oneDNN hazard),
  so it is refused, naming register_rule."""
  K = pytest.importorskip("keras")
  if (int(K.__version__.split(".")[0]) < 3
      or tuple(int(v) for v in tf.__version__.split(".")[:2]) < (2, 16)):
    pytest.skip("Keras 3 on TF >= 2.16 only")

  class Squared(K.layers.EinsumDense):
    def call(self, inputs, training=None):
      return super().call(inputs) ** 2

  layer = Squared("abc,cd->abd", (6, 4))
  inputs = K.layers.Input((6, 5))
  h = K.layers.GlobalAveragePooling1D()(layer(inputs))
  model = K.Model(inputs, K.layers.Dense(3)(h))
  loss = K.losses.SparseCategoricalCrossentropy(from_logits=True)
  model = loop_reference.compile_fast(K, model, 6, loss, CLIP,
                                      noise_multiplier=0.5)
  x = np.random.default_rng(0).normal(size=(6, 6, 5)).astype("float32")
  with pytest.raises(ValueError, match="register_rule"):
    model.fit(x, np.zeros(6, "int32"), batch_size=6, epochs=1, verbose=0)


def _off_batch_model(K, layout, seq=8, width=3):
  """A model whose Dense sees rows that are not examples: a table of
  ``seq`` positions (as many rows as the batch below: a shape check on the
  batch size cannot tell them apart) or a time-major transpose."""

  class OffBatch(K.layers.Layer):

    def __init__(self, **kwargs):
      super().__init__(**kwargs)
      self.proj = K.layers.Dense(width, use_bias=False,
                                 kernel_initializer=(
                                     K.initializers.GlorotUniform(seed=1)))

    def call(self, x):
      if layout == "positions":
        return x + self.proj(tf.one_hot(tf.range(seq), seq))
      return tf.transpose(self.proj(tf.transpose(x, [1, 0, 2])), [1, 0, 2])

  inputs = K.layers.Input((seq, width))
  h = K.layers.Flatten()(OffBatch(name="off_batch")(inputs))
  return K.Model(inputs, K.layers.Dense(2, kernel_initializer=(
      K.initializers.GlorotUniform(seed=2)))(h))


def _off_batch_step(K, layout):
  """``(model, fast, exact)`` for ``_off_batch_model`` on a fixed batch of
  8 (noise 0, clip 0.01): ``fast()`` is the fast path's clipped sum (traced
  anew at each call), ``exact()`` the exact path's."""
  from tf_dp.core import vectorized  # pylint: disable=g-import-not-at-top
  from tf_dp.dp_query.gaussian_query import GaussianSumQuery  # pylint: disable=g-import-not-at-top
  from tf_dp.keras import losses as losses_lib  # pylint: disable=g-import-not-at-top
  from tf_dp.keras import per_example  # pylint: disable=g-import-not-at-top
  from tf_dp.keras.fast import clipped_sum  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  x = tf.constant(rng.normal(size=(8, 8, 3)).astype("float32"))
  y = tf.constant(rng.normal(size=(8, 2)).astype("float32"))
  query = GaussianSumQuery(0.01, 0.0)
  params = query.derive_sample_params(query.initial_global_state())
  model = _off_batch_model(K, layout)
  model.compile(loss=K.losses.MeanSquaredError())
  loss_fn = losses_lib.per_example_loss_fn(model)

  def fast():
    return clipped_sum.clipped_batch_sum(model, loss_fn, x, y, None, query,
                                         params)[0]

  def exact():
    grads = per_example.record_gradients(model, loss_fn, x, y, None)[0]
    return vectorized.clipped_sum(query, params, grads)

  return model, fast, exact


@pytest.mark.parametrize("K", KERAS)
def test_a_layer_on_a_public_table_is_clipped_per_example(K):
  """A Dense on a public table of positions, its output added to every
  example: its gradient is a sum over the examples' axis, and each record's
  share is read from its own rows (before the gate, the table's 8 rows were
  read as 8 records each summing every example's terms: one example moved
  the clipped sum by 3.0 x 2C). Frozen, then unfrozen: the second trace
  taps it, no stale answer."""
  model, fast, exact = _off_batch_step(K, "positions")
  off_batch = model.get_layer("off_batch").proj
  off_batch.trainable = False  # Frozen: not tapped, the step runs.
  assert len(fast()) == len(model.trainable_variables)
  off_batch.trainable = True
  got = fast()
  assert len(got) == len(model.trainable_variables)
  for a, b in zip(got, exact()):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("K", KERAS)
def test_a_layer_on_time_major_rows_takes_the_per_layer_fallback(K):
  """A Dense on a time-major tensor [T, B, K]: proven per example on axis
  1, it is computed by the per-layer fallback on each example's rows; the
  clipped sum equals the exact path's (before the gate, its fast rule read
  time steps as records and one example moved the sum by 8.0 C)."""
  _, fast, exact = _off_batch_step(K, "time_major")
  for a, b in zip(fast(), exact()):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("K", KERAS)
def test_a_weight_read_inside_another_layers_call_is_refused(K):
  # A layer with weights of its own reads another layer's kernel (held by a
  # closure, so not a sublayer): before this was refused, that kernel's
  # clipped sum missed the reading layer's terms (max error 2.89 against
  # 10.4 for the largest entry, clip 1e6): training on a partial gradient.

  class Mix(K.layers.Layer):

    def build(self, shape):
      self.w = self.add_weight(shape=(shape[-1],), initializer="ones",
                               name="w")

    def call(self, x):
      return x * self.w + tf.matmul(x, tf.convert_to_tensor(self.table()))

  inputs = K.layers.Input((3,))
  first = K.layers.Dense(3, use_bias=False, kernel_initializer=(
      K.initializers.GlorotUniform(seed=1)))
  mix = Mix(name="mix")
  mix.table = lambda: first.kernel
  h = mix(first(inputs))
  model = K.Model(inputs, K.layers.Dense(2)(h))
  x = np.random.default_rng(0).normal(size=(4, 3)).astype("float32")
  loss = K.losses.MeanSquaredError()
  model = loop_reference.compile_fast(K, model, 4, loss, CLIP,
                                      noise_multiplier=0.5)
  with pytest.raises(ValueError, match="read inside the call of layer 'mix'"):
    model.fit(x, x[:, :2], batch_size=4, epochs=1, verbose=0)


@pytest.mark.parametrize("K", KERAS)
def test_vectorized_map_hazard_names_the_layer_and_the_fix(K):
  model = _attention_model(K)
  message = clipped_sum.vectorized_map_hazard(
      backend.for_object(model).all_layers(model))
  if (tuple(int(v) for v in tf.__version__.split(".")[:2]) < (2, 16)
      or K is not backend.keras3_module()):
    assert message is None
  else:
    assert "per_example_method='auto'" in message
    assert "MultiHeadAttention" in message or "EinsumDense" in message
  assert clipped_sum.vectorized_map_hazard(
      helpers.build_model(K, "dense").layers) is None


def test_unsupported_einsum_dense_is_refused_not_vectorized():
  """LoRA on an EinsumDense whose last kernel letter is a group letter has
  no fast rule; the per-layer fallback would run it under vectorized_map,
  so it is refused with the fix instead."""
  K = backend.keras3_module()
  if K is None or tuple(int(v) for v in tf.__version__.split(".")[:2]) < (
      2, 16):
    pytest.skip("Keras 3 on TF >= 2.16 only")
  layer = K.layers.EinsumDense("abc,bc->ac", 5)
  model = _sequential(K, (4, 5), [layer])
  layer.enable_lora(2)
  assert rules.rule_for(layer) is None
  x, y = _data((4, 5))
  model = helpers.compile_dp(K, model, population_size=6, learning_rate=1.0,
                             l2_norm_clip=CLIP, noise_multiplier=0.5)
  with pytest.raises(ValueError, match="per_example_method='auto'"):
    model.fit(x, y, batch_size=6, epochs=1, verbose=0)


def random_model(K, rng):
  """A random stack mixing fast-rule layers and fallback layers."""
  seed = int(rng.integers(1 << 30))
  init = lambda: K.initializers.GlorotUniform(seed=int(rng.integers(1 << 30)))
  conv = rng.integers(2)
  layers = [K.layers.Input((6, 6, 2) if conv else (6, 5))]
  if conv:
    layers += [K.layers.Conv2D(int(rng.integers(1, 4)), int(rng.integers(1, 4)),
                               strides=int(rng.integers(1, 3)),
                               padding=["same", "valid"][rng.integers(2)],
                               activation="relu", kernel_initializer=init()),
               K.layers.Flatten(), K.layers.Reshape((-1, 1)),
               K.layers.Conv1D(2, 3, activation="tanh", kernel_initializer=init())]
  layers += [K.layers.Dense(int(rng.integers(2, 6)), activation="tanh",
                            kernel_initializer=init()),
             K.layers.LayerNormalization(),
             K.layers.PReLU(alpha_initializer=K.initializers.RandomUniform(
                 0.1, 0.5, seed=seed)),  # no fast rule: per-layer fallback.
             K.layers.Flatten(),
             K.layers.Dense(4, kernel_initializer=init())]
  return K.Sequential(layers)


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("seed", range(4))
def test_random_models_fast_equals_vectorized(K, seed):
  rng = np.random.default_rng(seed)
  model = random_model(K, rng)
  model.compile(loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  shape = model.input_shape[1:]
  x = tf.constant(rng.normal(size=(6,) + shape).astype("float32"))
  y = tf.constant(rng.integers(0, 4, size=6).astype("int32"))
  query = GaussianSumQuery(0.3, 0.0)
  fast, slow = clipped_sums_both_ways(K, model, query, x, y)
  for a, b in zip(tf.nest.flatten(fast), tf.nest.flatten(slow)):
    np.testing.assert_allclose(a, b, atol=1e-5)
  plan = clipped_sum.clipping_plan(model)
  paths = {cls: path for _, cls, path in plan}
  assert "fast rule" in paths["Dense"]
  assert "local vectorized_map" in paths["PReLU"]


@pytest.mark.parametrize("K", KERAS)
def test_per_layer_and_adaptive_queries_and_microbatches(K):
  rng = np.random.default_rng(7)
  model = helpers.build_model(K, "conv")
  model.compile(loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  x, y = helpers.make_data("conv", 8)
  per_layer = NestedQuery([GaussianSumQuery(0.1, 0.0)
                           for _ in model.trainable_variables])
  adaptive = QuantileAdaptiveClipSumQuery(0.2, 0.0, 0.5, 0.1, 0.0, 8)
  for query, mb in [(per_layer, None), (adaptive, None), (per_layer, 4)]:
    fast, slow = clipped_sums_both_ways(K, model, query, tf.constant(x),
                                        tf.constant(y), mb)
    for a, b in zip(tf.nest.flatten(fast), tf.nest.flatten(slow)):
      np.testing.assert_allclose(a, b, atol=1e-5)
  del rng


@pytest.mark.parametrize("K", KERAS)
def test_non_finite_example_never_reaches_the_sum(K):
  model = helpers.build_model(K, "dense")
  model.compile(loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  x, y = helpers.make_data("dense", 4)
  x[1, 2] = np.nan
  x[3, 0] = np.inf
  query = GaussianSumQuery(0.5, 0.0)
  fast, slow = clipped_sums_both_ways(K, model, query, tf.constant(x),
                                      tf.constant(y))
  clean, _ = clipped_sums_both_ways(K, model, query, tf.constant(x[[0, 2]]),
                                    tf.constant(y[[0, 2]]))
  for a, b, c in zip(tf.nest.flatten(fast), tf.nest.flatten(slow),
                     tf.nest.flatten(clean)):
    assert np.all(np.isfinite(a)) and np.all(np.isfinite(b))
    np.testing.assert_allclose(a, c, atol=1e-6)
    np.testing.assert_allclose(b, c, atol=1e-6)
