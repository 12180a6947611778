"""Fast rules for convolutions and normalisations
(``tf_dp/keras/fast/conv_rules.py``, ``norm_rules.py``) against a
per-example loop, under TF's default settings (oneDNN on), and the
convolution rules' own kernel-gradient paths against TF's.

The loop comparisons are ``one_step._fast_step_matches_loop`` (tolerance
1e-5, stated there).
"""

import numpy as np
import pytest
import tensorflow as tf

from tests.keras.fast.one_step import KERAS
from tests.keras.fast.one_step import _data
from tests.keras.fast.one_step import _fast_step_matches_loop
from tests.keras.fast.one_step import _init
from tests.keras.fast.one_step import _sequential


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
    # More than 128 patch features: patches gathered from the input (stride
    # not dividing the kernel, valid windows that leave input unread).
    "conv2d_gathered_same": lambda K: ((7, 7, 9), [K.layers.Conv2D(
        3, 5, strides=2, padding="same", activation="tanh",
        kernel_initializer=_init(K))]),
    "conv2d_gathered_valid": lambda K: ((8, 9, 10), [K.layers.Conv2D(
        4, (4, 5), strides=(3, 2), kernel_initializer=_init(K))]),
    "conv2d_gathered_groups": lambda K: ((5, 5, 16), [K.layers.Conv2D(
        4, 3, groups=2, padding="same", kernel_initializer=_init(K))]),
    "depthwise_gathered": lambda K: ((6, 6, 16), [K.layers.DepthwiseConv2D(
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
@pytest.mark.parametrize("case", ["conv2d_one_channel", "conv2d_gathered_same"])
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


def test_patches_are_extract_patches_in_kernel_order():
  # Every method of _patches (one-hot convolution up to 128 features over
  # few channels or without static sizes, a gather of pixels otherwise,
  # ExtractImagePatches when there are too many kernel positions for the
  # gather's indices) gives the rows of ExtractImagePatches exactly, in the
  # kernel's order: a^T g is laid out as the kernel's gradient.
  from tf_dp.keras.fast import conv_rules  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  for shape, ks, st, dl, padding in [
      ((2, 28, 28, 1), [8, 8], [2, 2], [1, 1], "SAME"),  # one-hot
      ((2, 9, 8, 3), [3, 3], [1, 1], [1, 1], "SAME"),  # one-hot
      ((2, 9, 8, 8), [3, 3], [1, 1], [1, 1], "SAME"),  # gathered, 72
      ((2, 13, 13, 16), [4, 4], [2, 2], [1, 1], "VALID"),  # gathered
      ((2, 15, 14, 10), [5, 3], [3, 2], [1, 1], "VALID"),  # gathered
      ((2, 15, 14, 10), [5, 3], [2, 1], [1, 1], "SAME"),  # gathered
      ((2, 12, 12, 9), [4, 4], [3, 3], [1, 1], "SAME"),  # gathered
      ((2, 12, 11, 9), [4, 4], [1, 1], [2, 1], "SAME"),  # gathered, dilated
      ((2, 11, 13, 9), [3, 5], [2, 3], [3, 2], "SAME"),  # gathered, dilated
      ((2, 16, 17, 9), [3, 5], [2, 3], [3, 2], "VALID"),  # gathered, dilated
      ((2, 6, 5, 11), [7, 6], [1, 2], [1, 1], "SAME"),  # kernel > input
      ((2, 1, 40, 12), [1, 5], [1, 2], [1, 1], "SAME"),  # a 1-D layer
      ((2, 48, 48, 1), [24, 24], [1, 1], [1, 1], "SAME")]:  # too many
    x = tf.constant(rng.normal(size=shape).astype("float32"))
    got = conv_rules._patches(x, ks, st, dl, padding).numpy()  # pylint: disable=protected-access
    want = tf.image.extract_patches(x, [1] + ks + [1], [1] + st + [1],
                                    [1] + dl + [1], padding).numpy()
    np.testing.assert_array_equal(got, want.reshape(got.shape))
  # Without static spatial sizes: the one-hot convolution up to 128
  # features (72 here), ExtractImagePatches above (144).
  for channels in (8, 16):
    x = tf.constant(rng.normal(size=(2, 9, 8, channels)).astype("float32"))
    dynamic = tf.function(
        lambda t: conv_rules._patches(t, [3, 3], [2, 1], [1, 1], "SAME"),  # pylint: disable=protected-access
        input_signature=[tf.TensorSpec([None, None, None, channels])])
    want = tf.image.extract_patches(x, [1, 3, 3, 1], [1, 2, 1, 1],
                                    [1, 1, 1, 1], "SAME").numpy()
    got = dynamic(x).numpy()
    np.testing.assert_array_equal(got, want.reshape(got.shape))


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("records", [6, 3])
def test_materialised_gradients_are_kept_in_the_kernels_layout(K, records):
  # An ungrouped convolution whose per-record gradients are cheaper
  # materialised than ghost (one-hot and gathered patches) keeps them
  # for the clipped sum: each equals the record's gradient from a loop,
  # laid out as the kernel, and its squared norm is at least that of the
  # kept gradient, raised by the rounding bounds only (on random data
  # about 2 (gamma_2(K+C+4) + gamma_T U / norm): below 2e-4 here).
  from tf_dp.keras.fast import conv_rules  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(2)
  for layer, shape in [(K.layers.Conv2D(4, (4, 5), strides=(3, 2)),
                        (8, 9, 10)),
                       (K.layers.Conv2D(3, 3, padding="same"), (5, 6, 3)),
                       (K.layers.Conv1D(3, 2, strides=2), (9, 4))]:
    x = tf.constant(rng.normal(size=(6,) + shape).astype("float32"))
    out = layer(x)
    g = tf.constant(rng.normal(size=out.shape).astype("float32"))
    sq_norms, grads = conv_rules.ConvRule().kernel_norms_and_grads(
        layer, x, g, records)
    assert grads is not None, layer.name
    want = []
    for i in range(6):
      with tf.GradientTape() as tape:
        z = tf.reduce_sum(layer(x[i:i + 1]) * g[i:i + 1])
      want.append(tape.gradient(z, layer.kernel).numpy())
    want = np.asarray(want).reshape((records, 6 // records)
                                    + tuple(layer.kernel.shape)).sum(1)
    np.testing.assert_allclose(
        grads.numpy().reshape(want.shape), want, rtol=1e-4, atol=1e-5)
    exact = np.sum(np.square(grads.numpy().astype(np.float64)).reshape(
        records, -1), 1)
    assert np.all(sq_norms.numpy() >= exact)
    np.testing.assert_allclose(sq_norms, exact, rtol=2e-4)


@pytest.mark.parametrize("K", KERAS)
def test_gradients_larger_than_four_times_the_tapped_tensors_are_not_kept(K):
  # 3x3x64 -> 64 over 36 positions: materialised (cheaper than ghost), but a
  # record's gradient (36864 values) is more than 4x its input and output
  # gradient (4096 + 2304): norms only, the sum from Conv2DBackpropFilter.
  from tf_dp.keras.fast import conv_rules  # pylint: disable=g-import-not-at-top
  from tf_dp.keras.fast import linear  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(3)
  layer = K.layers.Conv2D(64, 3)
  x = tf.constant(rng.normal(size=(2, 8, 8, 64)).astype("float32"))
  g = tf.constant(rng.normal(size=layer(x).shape).astype("float32"))
  rule = conv_rules.ConvRule()
  a, rows_g = rule.kernel_rows(layer, x, g, 2)
  assert not linear.use_ghost(a, rows_g)
  sq_norms, grads = rule.kernel_norms_and_grads(layer, x, g, 2)
  assert grads is None
  np.testing.assert_allclose(
      sq_norms, linear.kernel_sq_norms(a, rows_g, 2), rtol=1e-6)


@pytest.mark.parametrize("K", KERAS)
def test_an_unknown_batch_size_takes_the_same_methods(K):
  # A batch of unknown size (dataset.batch(n) without drop_remainder, a
  # partial last batch of arrays): each record's positions stay static, so
  # the rules choose as for a static batch. Before, the first layer (one
  # channel, 196 positions) took float64 ghost norms: the tutorial CNN's
  # step 91-108 ms against 16-21 ms.
  from tf_dp.dp_query import GaussianSumQuery  # pylint: disable=g-import-not-at-top
  from tf_dp.keras import losses as losses_lib  # pylint: disable=g-import-not-at-top
  from tf_dp.keras.fast import clipped_sum  # pylint: disable=g-import-not-at-top
  model = K.Sequential([
      K.Input((28, 28, 1)),
      K.layers.Conv2D(4, 8, strides=2, padding="same", activation="relu",
                      kernel_initializer=_init(K)),
      K.layers.Conv2D(3, 4, strides=2, kernel_initializer=_init(K, 1)),
      K.layers.Flatten(), K.layers.Dense(3, kernel_initializer=_init(K, 2))])
  model.compile(loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  query = GaussianSumQuery(0.5, 0.0)
  params = query.derive_sample_params(query.initial_global_state())
  loss_fn = losses_lib.per_example_loss_fn(model)
  rng = np.random.default_rng(0)
  x = rng.normal(size=(6, 28, 28, 1)).astype("float32")
  y = rng.integers(0, 3, size=6).astype("int32")
  results, graphs = [], []
  for batch in (6, None):
    step = tf.function(
        lambda x, y: clipped_sum.clipped_batch_sum(
            model, loss_fn, x, y, None, query, params)[0],
        input_signature=[tf.TensorSpec([batch, 28, 28, 1]),
                         tf.TensorSpec([batch], tf.int32)])
    graphs.append(step.get_concrete_function().graph)
    results.append([t.numpy() for t in step(x, y)])
  # Without a static batch size the first layer's per-example gradients
  # come from patches (certified norms, raised by their rounding bounds)
  # instead of the depthwise form (exact float64 norms of the kept
  # gradients): clipped scales differ by about 1e-4 relative.
  for static, unknown in zip(*results):
    np.testing.assert_allclose(unknown, static, rtol=5e-4, atol=1e-6)
  float64_matmuls = [
      op.name for op in graphs[1].get_operations()
      if op.type in ("BatchMatMulV2", "BatchMatMulV3", "MatMul")
      and op.outputs[0].dtype == tf.float64]
  assert float64_matmuls == []
