"""LoRA on the fast path (``tf_dp/keras/fast/einsum_rule.py``,
``LoraFactors``; Embedding's in ``rules.py``): Keras 3 ``enable_lora`` on
Dense, EinsumDense and Embedding.

1. Certified norms on crafted records (the generators of ``test_linear``:
   cancelling positions with magnitudes up to 1e9, huge, tiny): the rule's
   squared norm of each factor is at least the exact float64 one (relative
   tolerance 1e-6, the reference's own rounding), and removing a record
   moves the clipped sum by at most C (1 + 1e-4).
2. A model with LoRA on all three kinds of layer (and on the query and
   value projections of MultiHeadAttention, as KerasHub's ``enable_lora``
   does) takes the same step as a per-example loop (``loop_reference``).
3. A layer with LoRA called twice in one forward pass (a shared layer): the
   norms are those of the sum of its calls (1. on calls that cancel each
   other), and a model sharing one equals the loop.

1.-3. are Keras 3's. 4. EinsumDense (ellipsis, group letters) and
MultiHeadAttention, in both flavours, take the same step as a per-example
loop (``one_step``, 1e-5), and a noised fit of them under TF's defaults
(oneDNN on) stays finite and lowers the loss.
"""

import numpy as np
import pytest
import tensorflow as tf

from tf_dp.keras import backend
from tf_dp.keras.fast import rules as rules_lib
from tests.keras import helpers
from tests.keras.fast import loop_reference
from tests.keras.fast import test_linear
from tests.keras.fast.one_step import FALLBACK
from tests.keras.fast.one_step import KERAS
from tests.keras.fast.one_step import _attention_model
from tests.keras.fast.one_step import _data
from tests.keras.fast.one_step import _fast_step_matches_loop
from tests.keras.fast.one_step import _init
from tests.keras.fast.one_step import _sequential
from tests.keras.fast.one_step import _tokens

K3 = backend.keras3_module()
KERAS3_ONLY = pytest.mark.skipif(K3 is None, reason="LoRA is Keras 3's")
CLIP = 1.0


def _lora_cases():
  """name -> (layer, input shape per record, integer input)."""
  L = K3.layers
  return {
      "dense": (L.Dense(6), (12, 10), False),
      "einsum_query": (L.EinsumDense("abc,cde->abde", (12, 2, 5),
                                     bias_axes="de"), (12, 8), False),
      "einsum_output": (L.EinsumDense("abcd,cde->abe", (12, 6)),
                        (12, 2, 5), False),
      "embedding": (L.Embedding(6, 8), (32,), True),
  }


def _with_lora(layer, x, rng, magnitude):
  layer(tf.constant(x[:1]))
  layer.enable_lora(3)
  factors = [v for v in layer.trainable_variables if "lora" in v.name]
  for v in factors:  # b starts at zero: random factors test both.
    v.assign(rng.normal(size=v.shape) * (magnitude ** 0.25))
  return factors


def _exact_factor_sq_norms(layer, x, g):
  """``[records, 2]`` float64 squared norms of each record's gradients of
  ``a`` and ``b``, from its float64 gradient ``dK`` of the merged kernel:
  ``s dK b^T`` and ``s a^T dK``."""
  embedding = isinstance(layer, K3.layers.Embedding)
  a, b = (np.asarray(v.numpy(), np.float64) for v in (
      (layer.lora_embeddings_a, layer.lora_embeddings_b) if embedding
      else (layer.lora_kernel_a, layer.lora_kernel_b)))
  scale = layer.lora_alpha / layer.lora_rank
  config = dict(layer.get_config(), dtype="float64")
  config.pop("lora_rank", None)
  config.pop("lora_alpha", None)
  copy = type(layer).from_config(config)
  copy(tf.constant(x[:1]) if embedding else tf.constant(x[:1], tf.float64))
  base = np.asarray((layer._embeddings if embedding else layer._kernel  # pylint: disable=protected-access
                     ).numpy(), np.float64)
  kernel = copy.embeddings if embedding else copy.kernel
  kernel.assign(base + scale * np.matmul(a, b))
  out = []
  for r in range(len(x)):
    xr = tf.constant(x[r:r + 1]) if embedding else tf.constant(
        x[r:r + 1], tf.float64)
    with tf.GradientTape() as tape:
      z = copy(xr)
    dk = np.asarray(tf.convert_to_tensor(tape.gradient(
        z, kernel, output_gradients=tf.constant(g[r:r + 1], tf.float64))))
    da = scale * np.tensordot(dk, b, axes=([-1], [1]))
    db = scale * np.tensordot(a, dk, axes=(list(range(a.ndim - 1)),
                                           list(range(dk.ndim - 1))))
    out.append([np.sum(da * da), np.sum(db * db)])
  return np.asarray(out)


@KERAS3_ONLY
@pytest.mark.parametrize(
    "name", ["dense", "einsum_output", "einsum_query", "embedding"])
@pytest.mark.parametrize("magnitude", [1e3, 1e9])
def test_lora_norms_bound_every_record_and_one_record_moves_the_sum_by_c(
    name, magnitude):
  layer, shape, integer = _lora_cases()[name]
  rng = np.random.default_rng(int(magnitude) % 997 + len(name))
  x = np.stack([test_linear._record(shape, mode, rng, magnitude, integer)  # pylint: disable=protected-access
                for mode in test_linear.MODES])
  x = x.astype("int32" if integer else "float32")
  _with_lora(layer, x, rng, magnitude)
  z = layer(tf.constant(x))
  g = np.stack([test_linear._out_grad(z.shape[1:], mode, rng, magnitude)  # pylint: disable=protected-access
                for mode in test_linear.MODES]).astype("float32")
  rule = rules_lib.rule_for(layer)
  assert rule is not None, name
  sq, sums = test_linear._rule_outputs(layer, rule, x, g)  # pylint: disable=protected-access
  exact = _exact_factor_sq_norms(layer, x, g)
  check = np.isfinite(sq.sum(1))
  for i in range(2):
    ok = check & (exact[:, i] > 1e-30)
    np.testing.assert_array_less((exact[:, i] * (1 - 1e-6))[ok], sq[ok, i],
                                 err_msg=f"{name}: a norm below the exact one")
  for r, mode in enumerate(test_linear.MODES):
    _, without = test_linear._rule_outputs(layer, rule, x, g, drop=r)  # pylint: disable=protected-access
    moved = np.sqrt(sum(np.sum(np.square(
        np.asarray(a, np.float64) - np.asarray(b, np.float64)))
                        for a, b in zip(sums, without)))
    assert moved <= CLIP * (1 + 1e-4), (name, mode, moved)


def _lora_model(seq=6, vocab=12):
  L = K3.layers
  init = lambda seed: K3.initializers.GlorotUniform(seed=seed)
  inputs = L.Input((seq,), dtype="int32")
  embedding = L.Embedding(vocab, 8, embeddings_initializer=init(1))
  attention = L.MultiHeadAttention(2, 4, kernel_initializer=init(2))
  dense = L.Dense(8, activation="tanh", kernel_initializer=init(3))
  h = embedding(inputs)
  h = h + attention(h, h)
  h = L.GlobalAveragePooling1D()(dense(h))
  model = K3.Model(inputs, L.Dense(3, kernel_initializer=init(4))(h))
  rng = np.random.default_rng(5)
  for layer in (embedding, attention.query_dense, attention.value_dense,
                dense):
    layer.enable_lora(2)
    for v in layer.trainable_variables:
      if "lora" in v.name:
        v.assign(0.5 * rng.normal(size=v.shape))
  attention.key_dense.trainable = False
  attention.output_dense.trainable = False
  return model


@KERAS3_ONLY
def test_lora_model_equals_loop():
  rng = np.random.default_rng(0)
  x = rng.integers(0, 12, size=(6, 6)).astype("int32")
  y = (x[:, 0] % 3).astype("int32")
  model = _lora_model()
  # 8 factors, 3 biases (query, value, dense), the head kernel and bias.
  assert len(model.trainable_variables) == 13
  plan = loop_reference.fast_step_matches_loop(K3, model, x, y, 0.5)
  assert not [n for n, p in plan.items() if "local vectorized_map" in p], plan


@KERAS3_ONLY
@pytest.mark.parametrize("name", ["dense", "einsum_query"])
@pytest.mark.parametrize("magnitude", [1e3, 1e9])
def test_shared_lora_layer_is_certified_for_the_sum_of_its_calls(
    name, magnitude):
  """A layer with LoRA called twice in one forward pass: call 2 undoes call
  1 (same inputs, output gradients negated plus a small part), so each
  call's factor gradients are huge and their sum is not. The norms bound
  the exact float64 norms of the summed factor gradients (1e-6) and
  removing a record moves the clipped sum by at most C (1 + 1e-4)."""
  layer, shape, _ = _lora_cases()[name]
  rng = np.random.default_rng(int(magnitude) % 991 + len(name))
  x = rng.normal(size=(4,) + shape).astype("float32")
  x[0] *= magnitude
  _with_lora(layer, x, rng, magnitude)
  z = layer(tf.constant(x))
  g1 = rng.normal(size=z.shape).astype("float32")
  g2 = (-g1 + rng.normal(size=z.shape)).astype("float32")
  rule = rules_lib.rule_for(layer)
  outputs = lambda drop=None: test_linear._rule_outputs(  # pylint: disable=protected-access
      layer, rule, x, [g1, g2], drop)
  sq, sums = outputs()
  # Both calls share x, so the summed gradient is that of g1 + g2.
  exact = _exact_factor_sq_norms(
      layer, x, g1.astype(np.float64) + g2.astype(np.float64))
  assert np.all(sq[:, :2] >= exact * (1 - 1e-6)), (sq, exact)
  for r in range(4):
    _, without = outputs(drop=r)
    moved = np.sqrt(sum(np.sum(np.square(np.asarray(a, np.float64)
                                         - np.asarray(b, np.float64)))
                        for a, b in zip(sums, without)))
    assert moved <= CLIP * (1 + 1e-4), (r, moved)


@KERAS3_ONLY
def test_shared_lora_layer_model_equals_loop():
  """A Dense with LoRA applied to two inputs (a siamese tower): the step
  equals a per-example loop (``loop_reference``, 1e-5)."""
  L = K3.layers
  left, right = L.Input((5,)), L.Input((5,))
  shared = L.Dense(6, activation="tanh", name="shared",
                   kernel_initializer=K3.initializers.GlorotUniform(seed=1))
  h = L.Concatenate()([shared(left), shared(right)])
  model = K3.Model([left, right], L.Dense(3, kernel_initializer=(
      K3.initializers.GlorotUniform(seed=2)))(h))
  shared.enable_lora(2)
  rng = np.random.default_rng(3)
  for v in shared.trainable_variables:
    if "lora" in v.name:
      v.assign(0.5 * rng.normal(size=v.shape))
  x = [rng.normal(size=(6, 5)).astype("float32") for _ in range(2)]
  y = rng.integers(0, 3, size=6).astype("int32")
  plan = loop_reference.fast_step_matches_loop(K3, model, x, y, 0.5)
  assert "DenseRule" in plan["shared"], plan


EINSUM_CASES = [
    # (equation, output_shape, bias_axes, input shape)
    ("ab,bc->ac", 4, "c", (5,)),
    ("abc,cd->abd", (4, 3), "d", (4, 5)),  # positions: ghost or materialised
    ("abc,cde->abde", (4, 2, 3), "de", (4, 5)),  # MHA query projection
    ("abcd,cde->abe", (4, 3), "e", (4, 2, 3)),  # MHA output projection
    ("...b,bc->...c", 3, "c", (2, 4, 5)),  # ellipsis
    ("abc,bcd->abd", (4, 3), "bd", (4, 5)),  # a group letter (b), bias on b
]


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("case", range(len(EINSUM_CASES)))
def test_einsum_dense_equals_loop(K, case):
  equation, out_shape, bias_axes, shape = EINSUM_CASES[case]
  layer = K.layers.EinsumDense(equation, output_shape=out_shape,
                               bias_axes=bias_axes, activation="tanh",
                               kernel_initializer=_init(K, 1),
                               bias_initializer=_init(K, 2))
  model = _sequential(K, shape, [layer])
  x, y = _data(shape)
  plan = _fast_step_matches_loop(K, model, x, y)
  assert "EinsumDenseRule" in plan[layer.name]


@pytest.mark.parametrize("K", KERAS)
def test_multi_head_attention_equals_loop(K):
  x, y = _tokens(6)
  plan = _fast_step_matches_loop(K, _attention_model(K), x, y)
  assert not [n for n, p in plan.items() if FALLBACK in p], plan


@pytest.mark.parametrize("K", KERAS)
def test_multi_head_attention_with_microbatches(K):
  x, y = _tokens(8, seed=1)
  _fast_step_matches_loop(K, _attention_model(K), x, y, num_microbatches=4)


@pytest.mark.parametrize("K", KERAS)
def test_attention_and_einsum_train_under_defaults(K):
  """DP fit with noise: finite and decreasing loss (no oneDNN corruption)."""
  x, y = _tokens(128, seed=2)
  model = helpers.compile_dp(K, _attention_model(K), population_size=128,
                             learning_rate=0.5, noise_multiplier=0.3)
  history = model.fit(x, y, batch_size=32, epochs=6, verbose=0).history
  losses = history["loss"]
  assert np.all(np.isfinite(losses)), losses
  assert losses[-1] < losses[0], losses
  for v in model.trainable_variables:
    assert np.all(np.isfinite(v.numpy())), v.name
