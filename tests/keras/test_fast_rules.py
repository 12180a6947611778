"""Fast rules for EinsumDense, MultiHeadAttention, convolutions and
GroupNormalization against a per-example loop, under TF's default settings
(oneDNN on).

Each case runs one ``make_private`` + ``fit`` step with zero noise and
learning rate 1 and compares the weights with ``helpers.reference_update``
(a Python loop over examples, float64). Tolerance 1e-5: float32 round-off of
sums over a few examples, far below any clipping error (clip 0.5 and
gradient norms ~1, so a wrong norm or a missing term shows as > 1e-2).
"""

import numpy as np
import pytest
import tensorflow as tf

from tf_dp.keras import backend
from tf_dp.keras.fast import clipped_sum
from tf_dp.keras.fast import rules
from tests.keras import helpers

KERAS = helpers.keras_modules()
CLIP = 0.5
FALLBACK = "local vectorized_map"


def _compile_dp(K, model, population_size, learning_rate=0.1,
                l2_norm_clip=1.0, noise_multiplier=1.0, **dp_kwargs):
  """``helpers.compile_dp`` without make_private's first-fit self-check.

  The self-check's reference runs the whole model under tf.vectorized_map,
  which crashes the process for Keras 3 MultiHeadAttention under TF 2.21's
  oneDNN (the bug these rules avoid); the comparisons here use a loop.
  """
  import tf_dp  # pylint: disable=g-import-not-at-top
  model = tf_dp.keras.make_private(model, self_check=False)
  model.compile(
      optimizer=tf_dp.DPOptimizer(
          K.optimizers.SGD(learning_rate), l2_norm_clip=l2_norm_clip,
          noise_multiplier=noise_multiplier, population_size=population_size,
          **dp_kwargs),
      loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  return model


def _fast_step_matches_loop(K, model, x, y, num_microbatches=None):
  microbatch = 1 if num_microbatches is None else len(x) // num_microbatches
  expected = helpers.reference_update(model, x, y, CLIP, 1.0, microbatch)
  kwargs = {} if num_microbatches is None else {
      "num_microbatches": num_microbatches}
  with pytest.warns(UserWarning, match="noise_multiplier=0"):
    model = _compile_dp(K, model, population_size=len(x),
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
  model = _compile_dp(K, _attention_model(K), population_size=128,
                             learning_rate=0.5, noise_multiplier=0.3)
  history = model.fit(x, y, batch_size=32, epochs=6, verbose=0).history
  losses = history["loss"]
  assert np.all(np.isfinite(losses)), losses
  assert losses[-1] < losses[0], losses
  for v in model.trainable_variables:
    assert np.all(np.isfinite(v.numpy())), v.name


CONV_CASES = {
    "conv2d_groups": lambda K: ((6, 6, 4), [K.layers.Conv2D(
        4, 3, groups=2, padding="same", activation="tanh",
        kernel_initializer=_init(K))]),
    "conv1d_dilated": lambda K: ((9, 2), [K.layers.Conv1D(
        3, 2, dilation_rate=2, kernel_initializer=_init(K))]),
    "conv3d": lambda K: ((4, 5, 4, 2), [K.layers.Conv3D(
        2, (2, 3, 2), strides=(1, 2, 1), padding="same", activation="relu",
        kernel_initializer=_init(K))]),
    "depthwise": lambda K: ((7, 7, 3), [K.layers.DepthwiseConv2D(
        3, strides=2, padding="same", depth_multiplier=2, activation="tanh",
        depthwise_initializer=_init(K), bias_initializer=_init(K, 1))]),
    "depthwise_dilated": lambda K: ((7, 7, 2), [K.layers.DepthwiseConv2D(
        2, dilation_rate=2, depthwise_initializer=_init(K))]),
    "separable": lambda K: ((7, 7, 3), [K.layers.SeparableConv2D(
        4, 3, strides=2, depth_multiplier=2, activation="tanh",
        depthwise_initializer=_init(K), pointwise_initializer=_init(K, 1),
        bias_initializer=_init(K, 2))]),
    "transpose_same": lambda K: ((3, 4, 2), [K.layers.Conv2DTranspose(
        3, 3, strides=2, padding="same", activation="tanh",
        kernel_initializer=_init(K), bias_initializer=_init(K, 1))]),
    "transpose_valid": lambda K: ((3, 3, 2), [K.layers.Conv2DTranspose(
        2, (3, 2), strides=(2, 1), kernel_initializer=_init(K))]),
    # One input channel, materialised norms: per-example kernel gradients
    # from one depthwise backprop-filter (the tutorial CNN's first layer).
    "conv2d_one_channel": lambda K: ((12, 12, 1), [K.layers.Conv2D(
        5, 4, strides=2, padding="same", activation="relu",
        kernel_initializer=_init(K), bias_initializer=_init(K, 1))]),
    "conv1d_one_channel": lambda K: ((11, 1), [K.layers.Conv1D(
        3, 3, strides=2, kernel_initializer=_init(K))]),
    # More than 128 patch features: patches from strided blocks (stride
    # not dividing the kernel, valid windows that leave input unread).
    "conv2d_blocks_same": lambda K: ((7, 7, 9), [K.layers.Conv2D(
        3, 5, strides=2, padding="same", activation="tanh",
        kernel_initializer=_init(K))]),
    "conv2d_blocks_valid": lambda K: ((8, 9, 10), [K.layers.Conv2D(
        4, (4, 5), strides=(3, 2), kernel_initializer=_init(K))]),
    "conv2d_blocks_groups": lambda K: ((5, 5, 16), [K.layers.Conv2D(
        4, 3, groups=2, padding="same", kernel_initializer=_init(K))]),
    "depthwise_blocks": lambda K: ((6, 6, 16), [K.layers.DepthwiseConv2D(
        3, padding="same", depthwise_initializer=_init(K))]),
    "group_norm": lambda K: ((4, 4, 6), [
        K.layers.Conv2D(6, 1, kernel_initializer=_init(K)),
        K.layers.GroupNormalization(
            3, gamma_initializer=K.initializers.RandomUniform(0.5, 1.5, 1),
            beta_initializer=K.initializers.RandomUniform(-0.5, 0.5, 2))]),
}


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("case", sorted(CONV_CASES))
def test_conv_and_norm_rules_equal_loop(K, case):
  shape, layers = CONV_CASES[case](K)
  model = _sequential(K, shape, layers)
  x, y = _data(shape)
  plan = _fast_step_matches_loop(K, model, x, y)
  for layer in layers:
    assert "fast rule" in plan[layer.name], (layer.name, plan[layer.name])


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("case", ["conv2d_one_channel", "conv2d_blocks_same"])
def test_conv_rules_with_microbatches(K, case):
  shape, layers = CONV_CASES[case](K)
  model = _sequential(K, shape, layers)
  x, y = _data(shape)
  _fast_step_matches_loop(K, model, x, y, num_microbatches=3)


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("records", [70, 35])
def test_one_channel_norms_in_chunks_equal_patch_norms(K, records):
  # A static batch of 70 (two chunks of the depthwise kernel gradient),
  # per example and in microbatches of two, against the patch path and a
  # per-example loop.
  from tf_dp.keras.fast import conv_rules  # pylint: disable=g-import-not-at-top
  from tf_dp.keras.fast import linear  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(1)
  for layer, shape in [(K.layers.Conv2D(5, 4, strides=2, padding="same"),
                        (12, 12, 1)),
                       (K.layers.Conv1D(3, 3, strides=2), (11, 1))]:
    x = tf.constant(rng.normal(size=(70,) + shape).astype("float32"))
    out = layer(x)
    g = tf.constant(rng.normal(size=out.shape).astype("float32"))
    rule = conv_rules.ConvRule()
    assert conv_rules._single_channel_kernel_grads(layer, x, g) is not None  # pylint: disable=protected-access
    direct = tf.function(rule.kernel_sq_norms)(layer, x, g, records)
    patches = linear.LinearRule.kernel_sq_norms(rule, layer, x, g, records)
    np.testing.assert_allclose(direct, patches, rtol=1e-5)
    kernel = layer.kernel
    per_example = []
    for i in range(70):
      with tf.GradientTape() as tape:
        z = tf.reduce_sum(layer(x[i:i + 1]) * g[i:i + 1])
      per_example.append(tape.gradient(z, kernel).numpy())
    per_record = np.asarray(per_example).reshape(records, -1).reshape(
        records, 70 // records, -1).sum(1)
    np.testing.assert_allclose(direct, np.sum(per_record ** 2, 1), rtol=1e-4)


def test_strided_block_patches_equal_extract_patches():
  # Each patch holds the same values as ExtractImagePatches' (the feature
  # order within a patch may differ; norms do not depend on it).
  from tf_dp.keras.fast import conv_rules  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  for shape, ks, st, padding in [((2, 28, 28, 1), [8, 8], [2, 2], "SAME"),
                                 ((2, 13, 13, 16), [4, 4], [2, 2], "VALID"),
                                 ((2, 9, 8, 3), [3, 3], [1, 1], "SAME"),
                                 ((2, 15, 14, 2), [5, 3], [3, 2], "VALID"),
                                 ((2, 15, 14, 2), [5, 3], [2, 1], "SAME")]:
    x = tf.constant(rng.normal(size=shape).astype("float32"))
    got = conv_rules._strided_block_patches(x, ks, st, padding).numpy()  # pylint: disable=protected-access
    want = tf.image.extract_patches(x, [1] + ks + [1], [1] + st + [1],
                                    [1, 1, 1, 1], padding).numpy()
    assert got.shape == want.shape, (shape, ks, st, padding)
    np.testing.assert_array_equal(np.sort(got, -1), np.sort(want, -1))


def _user_dense_class(K):
  class Dense(K.layers.Layer):  # pylint: disable=invalid-name
    """Named like keras.layers.Dense, but z = x kernel^3 (not linear)."""

    def __init__(self, units, **kwargs):
      super().__init__(**kwargs)
      self.units = units

    def build(self, input_shape):
      self.kernel = self.add_weight(
          name="kernel", shape=(int(input_shape[-1]), self.units),
          initializer=K.initializers.RandomUniform(-1.0, 1.0, seed=3))

    def call(self, inputs):
      return tf.matmul(inputs, self.kernel ** 3)
  return Dense


@pytest.mark.parametrize("K", KERAS)
def test_a_user_layer_named_dense_gets_no_dense_rule(K):
  layer = _user_dense_class(K)(4)
  model = _sequential(K, (5,), [layer])
  assert type(layer).__name__ == "Dense" and rules.rule_for(layer) is None
  x, y = _data((5,))
  plan = _fast_step_matches_loop(K, model, x, y)
  assert FALLBACK in plan[layer.name]


@pytest.mark.parametrize("K", KERAS)
def test_subclasses_inherit_rules_only_without_new_computation(K):
  class Renamed(K.layers.Dense):
    """Only construction and configuration: the parent's call."""

    def __init__(self, units, **kwargs):
      super().__init__(units, use_bias=False, **kwargs)

    def get_config(self):
      return super().get_config()

  class Cubed(Renamed):
    def call(self, inputs):
      return tf.matmul(inputs, self.kernel ** 3)

  class Rebuilt(K.layers.Dense):
    def build(self, input_shape):
      super().build(input_shape)

  assert isinstance(rules.rule_for(Renamed(3)), rules.DenseRule)
  assert rules.rule_for(Cubed(3)) is None  # Below a neutral class too.
  assert rules.rule_for(Rebuilt(3)) is None
  patched = K.layers.Dense(3)
  patched.call = lambda inputs: inputs
  assert rules.rule_for(patched) is None
  rules.register_rule(Cubed, rules.DenseRule())
  try:
    assert isinstance(rules.rule_for(Cubed(3)), rules.DenseRule)
  finally:
    del rules._RULES[Cubed]  # pylint: disable=protected-access
  assert isinstance(rules.rule_for(K.layers.Dense(3)), rules.DenseRule)
  # The inherited rule computes the subclass's gradients.
  layer = Renamed(4, activation="tanh", kernel_initializer=_init(K, 1))
  x, y = _data((5,))
  plan = _fast_step_matches_loop(K, _sequential(K, (5,), [layer]), x, y)
  assert "DenseRule" in plan[layer.name]


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
  model = _compile_dp(K, model, population_size=6, learning_rate=1.0,
                             l2_norm_clip=CLIP, noise_multiplier=0.5)
  with pytest.raises(ValueError, match="per_example_method='auto'"):
    model.fit(x, y, batch_size=6, epochs=1, verbose=0)


def test_register_rule_refuses_names():
  with pytest.raises(TypeError, match="keyed by class"):
    rules.register_rule("Dense", rules.DenseRule())


def _transformer(K, seq=8, vocab=20, width=8):
  inputs = K.layers.Input((seq,), dtype="int32")
  h = K.layers.Embedding(vocab, width)(inputs)
  for _ in range(2):
    h = K.layers.LayerNormalization()(
        h + K.layers.MultiHeadAttention(2, width // 2)(h, h))
    h = K.layers.LayerNormalization()(
        h + K.layers.Dense(width, activation="relu")(h))
  h = K.layers.GlobalAveragePooling1D()(h)
  return K.Model(inputs, K.layers.Dense(3)(h))


def _mobilenet(K):
  layers = K.layers
  inputs = layers.Input((16, 16, 3))
  h = layers.Conv2D(8, 3, strides=2, padding="same", activation="relu")(inputs)
  h = layers.GroupNormalization(4)(h)
  for filters, stride in ((16, 1), (16, 2)):
    h = layers.DepthwiseConv2D(3, strides=stride, padding="same",
                               activation="relu")(h)
    h = layers.GroupNormalization(4)(h)
    h = layers.Conv2D(filters, 1, activation="relu")(h)
  h = layers.SeparableConv2D(16, 3, padding="same", activation="relu")(h)
  h = layers.Conv2D(16, 3, groups=4, padding="same", activation="relu")(h)
  h = layers.GlobalAveragePooling2D()(h)
  return K.Model(inputs, layers.Dense(3)(h))


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("kind", ["transformer", "mobilenet"])
def test_transformer_and_mobilenet_never_fall_back(K, kind):
  model = _transformer(K) if kind == "transformer" else _mobilenet(K)
  if kind == "transformer":
    x, y = _tokens(6, seq=8, vocab=20)
  else:
    x, y = _data((16, 16, 3))
  plan = _fast_step_matches_loop(K, model, x, y)
  assert not [n for n, p in plan.items() if FALLBACK in p], plan


BUILTIN = {"Dense": (2,), "EinsumDense": ("ab,bc->ac", 2), "Embedding": (3, 2),
           "Conv1D": (2, 2), "Conv2D": (2, 2), "Conv3D": (2, 2),
           "DepthwiseConv2D": (2,), "SeparableConv2D": (2, 2),
           "Conv2DTranspose": (2, 2), "LayerNormalization": (),
           "GroupNormalization": (1,)}


@pytest.mark.parametrize("K", KERAS)
def test_builtin_rules_cover_both_flavours(K):
  for name, args in BUILTIN.items():
    layer = getattr(K.layers, name)(*args)
    assert rules.rule_for(layer) is not None, name
