"""One noiseless DP step on the fast path, against references: shared by
the tests of ``tf_dp/keras/fast/``.

``_fast_step_matches_loop`` runs one ``make_private`` + ``fit`` step with
zero noise and learning rate 1 and compares the weights with
``helpers.reference_update`` (a Python loop over examples, float64).
Tolerance 1e-5: float32 round-off of sums over a few examples, far below
any clipping error (clip 0.5 and gradient norms ~1, so a wrong norm or a
missing term shows as > 1e-2). ``clipped_sums_both_ways`` gives a query's
clipped sum on the fast path and under tf.vectorized_map.
"""

import numpy as np
import pytest
import tensorflow as tf

from tf_dp.keras import losses as losses_lib
from tf_dp.keras import per_example
from tf_dp.keras.fast import clipped_sum
from tests.keras import helpers

KERAS = helpers.keras_modules()
CLIP = 0.5
FALLBACK = "local vectorized_map"


def _fast_step_matches_loop(K, model, x, y, num_microbatches=None):
  microbatch = 1 if num_microbatches is None else len(x) // num_microbatches
  expected = helpers.reference_update(model, x, y, CLIP, 1.0, microbatch)
  kwargs = {} if num_microbatches is None else {
      "num_microbatches": num_microbatches}
  with pytest.warns(UserWarning, match="noise_multiplier=0"):
    model = helpers.compile_dp(K, model, population_size=len(x),
                               learning_rate=1.0, l2_norm_clip=CLIP,
                               noise_multiplier=0.0,
                               per_example_method="fast", **kwargs)
  model.fit(x, y, batch_size=len(x), epochs=1, shuffle=False, verbose=0)
  for v, e in zip(model.trainable_variables, expected):
    np.testing.assert_allclose(np.asarray(v.numpy(), np.float64), e,
                               atol=1e-5, err_msg=v.name)
  return {name: path for name, _, path in clipped_sum.clipping_plan(model)}


def _sequential(K, input_shape, layers, input_dtype="float32"):
  return K.Sequential([K.layers.Input(input_shape, dtype=input_dtype)]
                      + layers + [K.layers.Flatten(),
                                  K.layers.Dense(3, kernel_initializer=_init(K))])


def _init(K, seed=0):
  return K.initializers.GlorotUniform(seed=seed)


def _data(shape, n=6, seed=0, scale=1.0):
  rng = np.random.default_rng(seed)
  x = (scale * rng.normal(size=(n,) + shape)).astype("float32")
  return x, rng.integers(0, 3, size=n).astype("int32")


def _attention_model(K, heads=2, seq=6, vocab=12):
  inputs = K.layers.Input((seq,), dtype="int32")
  h = K.layers.Embedding(vocab, 8, embeddings_initializer=_init(K, 3))(inputs)
  attention = K.layers.MultiHeadAttention(heads, 4,
                                          kernel_initializer=_init(K, 4))
  h = K.layers.LayerNormalization()(h + attention(h, h))
  h = K.layers.GlobalAveragePooling1D()(h)
  return K.Model(inputs, K.layers.Dense(3, kernel_initializer=_init(K, 5))(h))


def _tokens(n, seq=6, vocab=12, seed=0):
  rng = np.random.default_rng(seed)
  x = rng.integers(0, vocab, size=(n, seq)).astype("int32")
  return x, (x[:, 0] % 3).astype("int32")


def clipped_sums_both_ways(K, model, query, x, y, microbatches=None):
  loss_fn = losses_lib.per_example_loss_fn(model)
  state = query.initial_global_state()

  @tf.function  # as in training: model.fit runs the step in a tf.function.
  def both(x, y):
    params = query.derive_sample_params(state)
    fast, _, _, _ = clipped_sum.clipped_batch_sum(model, loss_fn, x, y, None,
                                                  query, params, microbatches)
    grads = per_example.record_gradients(model, loss_fn, x, y, None,
                                         microbatches).grads
    clipped = tf.vectorized_map(lambda g: query.preprocess_record(params, g),
                                grads)
    slow = tf.nest.map_structure(lambda t: tf.reduce_sum(t, 0), clipped)
    return fast, slow

  return both(x, y)
