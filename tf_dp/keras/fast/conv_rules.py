"""Rules for convolutions (channels_last): Conv1D/2D/3D (grouped too),
DepthwiseConv2D, SeparableConv2D and Conv2DTranspose.

Norms: image patches give each record's rows ``a`` (``linear.py``); the
ghost norm or the materialised gradient is taken per layer. Clipped sums:
where a record's gradient was materialised (an ungrouped convolution), the
scaled sum of those gradients; otherwise the kernel gradient op TensorFlow
uses for the layer (Conv2DBackpropFilter and friends) applied to the
per-record scaled output gradients, so no patches are formed for the sum.
"""

import dataclasses
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from tf_dp.keras.fast import linear
from tf_dp.keras.fast import rule_types
from tf_dp.keras.fast import taps as taps_lib


def _padding(layer: Any) -> str:
  return str(layer.padding).upper()


def _channels_last(layer: Any) -> bool:
  return getattr(layer, "data_format", "channels_last") == "channels_last"


def _as_2d(layer: Any) -> Tuple[List[int], List[int], List[int]]:
  """kernel size, strides and dilations as 2-D lists (1-D gets a unit row)."""
  ks, st, dl = (list(layer.kernel_size), list(layer.strides),
                list(layer.dilation_rate))
  if len(ks) == 1:
    ks, st, dl = [1] + ks, [1] + st, [1] + dl
  return ks, st, dl


# Patches with at most ONE_HOT_PATCHES_MAX_FEATURES features over fewer than
# GATHERED_PATCHES_MIN_CHANNELS input channels come from a convolution with
# a one-hot kernel (oneDNN): it costs F multiply-adds per patch element but
# beats copying rows of so few channels (the tutorial CNN's first layer,
# 8x8x1 patches). Other patches of a 2-D convolution with static spatial
# sizes are one gather of the input's pixels (``_gathered_patches``; the
# tutorial CNN's second layer 0.9 ms against 2.5 ms by strided blocks and
# 3.3 ms by ExtractImagePatches at batch 256), up to
# ``GATHERED_PATCHES_MAX_INDICES`` kernel positions (a graph constant of 4
# bytes each); the rest by the one-hot convolution up to 128 features, else
# ExtractImagePatches. Measured at batch 128, 28x28 inputs, 3x3 kernels:
# one-hot / gather 4.7 / 13.7 ms with 1 channel, 15.3 / 14.9 ms with 6, 30
# / 15 ms with 8, 65 / 22 ms with 14. All are exact (copies, or products
# with 1 and 0).
ONE_HOT_PATCHES_MAX_FEATURES = 128
GATHERED_PATCHES_MIN_CHANNELS = 6
GATHERED_PATCHES_MAX_INDICES = 1 << 20


def _patches(x: tf.Tensor, ks: List[int], st: List[int], dl: List[int],
             padding: str) -> tf.Tensor:
  """[B, *spatial, C] -> [B, T, F] with F = prod(ks) * C.

  Each row holds the input values under one kernel position in the
  kernel's order (F = [*kernel offsets, C], row-major, channel innermost),
  whatever the method: ``a^T g`` is laid out as the kernel's gradient.
  """
  features = x.shape[-1]
  for k in ks:
    features *= k
  if len(ks) == 3:
    patches = tf.extract_volume_patches(x, [1] + ks + [1], [1] + st + [1],
                                        padding)
    return linear.example_rows(patches, [features])
  one_hot = features <= ONE_HOT_PATCHES_MAX_FEATURES
  patches = None
  if not one_hot or x.shape[-1] >= GATHERED_PATCHES_MIN_CHANNELS:
    patches = _gathered_patches(x, ks, st, dl, padding)
  if patches is None and one_hot:
    kernel = tf.reshape(tf.eye(features, dtype=x.dtype),
                        ks + [x.shape[-1], features])
    patches = tf.nn.conv2d(x, kernel, [1] + st + [1], padding,
                           dilations=[1] + dl + [1])
  if patches is None:
    patches = tf.image.extract_patches(
        x, sizes=[1] + ks + [1], strides=[1] + st + [1],
        rates=[1] + dl + [1], padding=padding)
  return linear.example_rows(patches, [features])


def _window(size: int, kernel: int, stride: int, dilation: int,
            padding: str) -> Tuple[int, int]:
  """(outputs, zeros before) of one axis of a convolution."""
  extent = dilation * (kernel - 1) + 1
  if padding == "SAME":
    out = -(-size // stride)
    return out, max((out - 1) * stride + extent - size, 0) // 2
  return (size - extent) // stride + 1, 0


def _gathered_patches(x: tf.Tensor, ks: List[int], st: List[int], dl: List[int],
                      padding: str) -> Optional[tf.Tensor]:
  """``[B, out_h * out_w, kh * kw * C]`` patches of a 2-D convolution by
  one gather of ``x``'s pixels, or None when a spatial size is not static
  or there are more than ``GATHERED_PATCHES_MAX_INDICES`` kernel positions.

  Pixel ``(r, c)`` is row ``r * W + c`` of ``x`` as ``[B, H * W, C]``; a
  position in the zero padding reads an appended zero row. The indices are
  a constant computed here, in the kernel's order.
  """
  height, width, channels = x.shape[1], x.shape[2], x.shape[-1]
  if height is None or width is None:
    return None
  out_h, top = _window(height, ks[0], st[0], dl[0], padding)
  out_w, left = _window(width, ks[1], st[1], dl[1], padding)
  if out_h * out_w * ks[0] * ks[1] > GATHERED_PATCHES_MAX_INDICES:
    return None
  rows = (np.arange(out_h)[:, None, None, None] * st[0]
          + np.arange(ks[0])[None, None, :, None] * dl[0] - top)
  cols = (np.arange(out_w)[None, :, None, None] * st[1]
          + np.arange(ks[1])[None, None, None, :] * dl[1] - left)
  inside = (rows >= 0) & (rows < height) & (cols >= 0) & (cols < width)
  index = np.where(inside, rows * width + cols, height * width)
  pixels = tf.reshape(x, [-1, height * width, channels])
  if not inside.all():
    pixels = tf.concat(
        [pixels, tf.zeros([tf.shape(x)[0], 1, channels], x.dtype)], 1)
  index = index.reshape(-1).astype(
      np.int32 if height * width < 2 ** 31 else np.int64)
  patches = tf.gather(pixels, index, axis=1)
  return tf.reshape(patches, [-1, out_h * out_w, ks[0] * ks[1] * channels])


def _grouped(t: tf.Tensor, groups: int, inner: int) -> tf.Tensor:
  """[B, T, outer * groups * inner] -> [B, T, groups, outer * inner]."""
  if groups == 1:
    return tf.expand_dims(t, 2)
  t = tf.reshape(t, [tf.shape(t)[0], tf.shape(t)[1], -1, groups, inner])
  t = tf.transpose(t, [0, 1, 3, 2, 4])
  return tf.reshape(t, [tf.shape(t)[0], tf.shape(t)[1], groups, -1])


def _backprop_filter(x: tf.Tensor, filter_shape: List[int], g: tf.Tensor,
                     strides: List[int], padding: str,
                     dilations: List[int]) -> tf.Tensor:
  """The kernel gradient of a 2-D or 3-D convolution (NHWC / NDHWC)."""
  if max(dilations) > 1:
    # TensorFlow's CPU kernels without oneDNN (the default on CPUs without
    # AVX-512) have no dilated backprop-filter: differentiate the forward
    # (space-to-batch) convolution, as Keras's own gradient does.
    kernel = tf.zeros(filter_shape, x.dtype)
    with tf.GradientTape() as tape:
      tape.watch(kernel)
      z = tf.nn.convolution(x, kernel, strides=strides, padding=padding,
                            dilations=dilations)
    return tape.gradient(z, kernel, output_gradients=g)
  if len(filter_shape) == 5:
    return tf.raw_ops.Conv3DBackpropFilterV2(
        input=x, filter_sizes=filter_shape, out_backprop=g,
        strides=[1] + strides + [1], padding=padding,
        dilations=[1] + dilations + [1])
  return tf.compat.v1.nn.conv2d_backprop_filter(
      x, filter_shape, g, [1] + strides + [1], padding,
      dilations=[1] + dilations + [1])


# Examples per depthwise backprop-filter call: oneDNN's kernel slows down
# sharply with very many channels (measured, tutorial CNN's first layer:
# batch 1024 in one call 27.7 ms, in chunks of 64 7.1 ms; one-hot patches
# and a batched matmul 12.1 ms).
SINGLE_CHANNEL_CHUNK = 64


def _single_channel_kernel_grads(layer: Any, x: tf.Tensor,
                                 g: tf.Tensor) -> Optional[tf.Tensor]:
  """``[kh, kw, B, C_out]`` per-example kernel gradients of an undilated,
  ungrouped 1-D or 2-D convolution with one input channel, or None.

  With one input channel, examples can be the channels of one image: the
  depthwise kernel gradient of ``[1, H, W, b]`` for output gradients
  ``[1, H', W', b * C_out]`` is, for channel i, example i's kernel gradient
  (no patches are formed). The batch (its size must be static) goes in
  chunks of ``SINGLE_CHANNEL_CHUNK`` examples.
  """
  ks, st, dl = _as_2d(layer)
  if (layer.kernel.shape[-2] != 1 or getattr(layer, "groups", 1) != 1
      or max(dl) > 1 or len(layer.kernel_size) > 2 or x.shape[0] is None):
    return None
  if len(layer.kernel_size) == 1:
    # A unit row: its stride is immaterial, and TensorFlow's kernel without
    # oneDNN takes equal strides only.
    x, g, st = x[:, None], g[:, None], [st[1], st[1]]
  elif st[0] != st[1]:
    return None  # No kernel for unequal strides without oneDNN.
  positions: Optional[int] = 1
  for d in g.shape[1:-1]:
    positions = None if d is None or positions is None else positions * d
  kernel, out = ks[0] * ks[1], g.shape[-1]
  if positions is None or linear.use_ghost_sizes(positions, kernel, out):
    return None
  chunks = []
  for start in range(0, x.shape[0], SINGLE_CHANNEL_CHUNK):
    xs = x[start:start + SINGLE_CHANNEL_CHUNK]
    gs = g[start:start + SINGLE_CHANNEL_CHUNK]
    size = xs.shape[0]
    images = tf.transpose(xs, [3, 1, 2, 0])  # [1, H, W, b]
    out_grads = tf.reshape(tf.transpose(gs, [1, 2, 0, 3]),
                           [1, gs.shape[1], gs.shape[2], size * out])
    chunks.append(tf.nn.depthwise_conv2d_backprop_filter(
        images, [ks[0], ks[1], size, out], out_grads, [1] + st + [1],
        _padding(layer)))  # [kh, kw, b, C_out]
  return tf.concat(chunks, 2) if len(chunks) > 1 else chunks[0]


class ConvRule(linear.LinearRule):
  """keras.layers.Conv1D / Conv2D (any groups) / Conv3D (no dilation)."""

  def kernel_norms_and_grads(
      self, layer: Any, x: tf.Tensor, g: tf.Tensor,
      records: linear.Records) -> Tuple[tf.Tensor, Optional[tf.Tensor]]:
    grads = _single_channel_kernel_grads(layer, x, g)
    if grads is not None:
      # [kh * kw, R, m, C_out]: a record's gradient sums its m examples'.
      grads = tf.reshape(grads, [-1, records, tf.shape(grads)[2] // records,
                                 grads.shape[-1]])
      per_record = tf.transpose(tf.reduce_sum(grads, 2), [1, 0, 2])
      # The clipped sum is formed from these same gradients, so their norms
      # bound what each record adds exactly.
      return linear.exact_sq_norms(per_record), per_record
    if getattr(layer, "groups", 1) > 1:
      return super().kernel_norms_and_grads(layer, x, g, records)
    held = None
    if x.shape[1:].is_fully_defined() and g.shape[1:].is_fully_defined():
      held = x.shape[1:].num_elements() + g.shape[1:].num_elements()
    a, g = self.kernel_rows(layer, x, g, records)
    if not linear.keeps_gradients(a, g, held):
      return linear.kernel_sq_norms(a, g, records), None
    # [R, K, C]: patch rows are in the kernel's order (``_patches``).
    return linear.kept_gradients(a, g)

  def supports(self, layer: Any) -> bool:
    rank = len(layer.kernel_size)
    return (super().supports(layer) and _channels_last(layer)
            and str(layer.padding).lower() in ("valid", "same")
            and (rank < 3 or (max(layer.dilation_rate) == 1
                              and getattr(layer, "groups", 1) == 1)))

  def kernel_rows(self, layer: Any, x: tf.Tensor, g: tf.Tensor,
                  records: linear.Records) -> Tuple[tf.Tensor, tf.Tensor]:
    ks, st, dl = _as_2d(layer)
    if len(layer.kernel_size) == 1:
      x = x[:, None]
    groups = getattr(layer, "groups", 1)
    channels_in = layer.kernel.shape[-2]
    a = _patches(x, ks, st, dl, _padding(layer))
    a = _grouped(a, groups, channels_in)
    g = linear.example_rows(g, [groups, g.shape[-1] // groups])
    return linear.grouped_rows(a, records), linear.grouped_rows(g, records)

  def kernel_sum(self, layer: Any, x: tf.Tensor, g: tf.Tensor) -> tf.Tensor:
    shape = list(layer.kernel.shape)
    strides, dilations = list(layer.strides), list(layer.dilation_rate)
    if len(layer.kernel_size) == 1:
      _, strides, dilations = _as_2d(layer)
      x, g, shape = x[:, None], g[:, None], [1] + shape
    groups = getattr(layer, "groups", 1)
    if groups == 1:
      return _backprop_filter(x, shape, g, strides, _padding(layer), dilations)
    # TensorFlow's kernels without oneDNN take no grouped backprop-filter:
    # group i's kernel slice is the ungrouped gradient of its own input and
    # output channels.
    xs, gs = tf.split(x, groups, axis=-1), tf.split(g, groups, axis=-1)
    shape[-1] //= groups
    return tf.concat([
        _backprop_filter(xi, shape, gi, strides, _padding(layer), dilations)
        for xi, gi in zip(xs, gs)], -1)


def _depthwise_supported(layer: Any) -> bool:
  strides, dilations = list(layer.strides), list(layer.dilation_rate)
  return (len(strides) == 2 and _channels_last(layer)
          and str(layer.padding).lower() in ("valid", "same")
          and not (max(strides) > 1 and max(dilations) > 1))


def _depthwise_rows(layer: Any, kernel: Any, x: tf.Tensor, g: tf.Tensor,
                    records: linear.Records) -> Tuple[tf.Tensor, tf.Tensor]:
  """Rows of the depthwise kernel [kh, kw, C, M]: C groups of K=kh*kw."""
  ks, st, dl = list(layer.kernel_size), list(layer.strides), list(
      layer.dilation_rate)
  channels, multiplier = kernel.shape[2], kernel.shape[3]
  a = _patches(x, ks, st, dl, _padding(layer))  # [B, T, kh*kw*C]
  a = tf.reshape(a, [tf.shape(a)[0], tf.shape(a)[1], -1, channels])
  a = tf.transpose(a, [0, 1, 3, 2])  # [B, T, C, kh*kw]
  g = linear.example_rows(g, [channels, multiplier])
  return linear.grouped_rows(a, records), linear.grouped_rows(g, records)


def _depthwise(layer: Any, kernel: Any, x: tf.Tensor) -> tf.Tensor:
  return tf.nn.depthwise_conv2d(x, kernel, [1] + list(layer.strides) + [1],
                                _padding(layer),
                                dilations=list(layer.dilation_rate))


def _depthwise_sum(layer: Any, kernel: Any, x: tf.Tensor,
                   g: tf.Tensor) -> tf.Tensor:
  """Kernel gradient of the depthwise convolution for output gradient g."""
  if max(layer.dilation_rate) == 1:
    return tf.nn.depthwise_conv2d_backprop_filter(
        x, list(kernel.shape), g, [1] + list(layer.strides) + [1],
        _padding(layer))
  # No native dilated backprop-filter kernel on CPU: differentiate the
  # (space-to-batch) forward instead.
  kernel = tf.convert_to_tensor(kernel)
  with tf.GradientTape() as tape:
    tape.watch(kernel)
    z = _depthwise(layer, kernel, x)
  return tape.gradient(z, kernel, output_gradients=g)


class DepthwiseConv2DRule(linear.LinearRule):
  """keras.layers.DepthwiseConv2D (channels_last)."""

  def supports(self, layer: Any) -> bool:
    return super().supports(layer) and _depthwise_supported(layer)

  def kernel(self, layer: Any) -> Any:
    """Keras 3 names the depthwise kernel ``kernel``, Keras 2
    ``depthwise_kernel``."""
    kernel = getattr(layer, "depthwise_kernel", None)
    return layer.kernel if kernel is None else kernel

  def kernel_rows(self, layer: Any, x: tf.Tensor, g: tf.Tensor,
                  records: linear.Records) -> Tuple[tf.Tensor, tf.Tensor]:
    return _depthwise_rows(layer, self.kernel(layer), x, g, records)

  def kernel_sum(self, layer: Any, x: tf.Tensor, g: tf.Tensor) -> tf.Tensor:
    return _depthwise_sum(layer, self.kernel(layer), x, g)


class SeparableConv2DRule(linear.KernelRule):
  """keras.layers.SeparableConv2D: a depthwise kernel, then a 1x1 one.

  The depthwise output u is recomputed from the tapped input; the pointwise
  kernel is a Dense kernel on u, the depthwise one sees ``g W_p^T``.
  """

  def supports(self, layer: Any) -> bool:
    return super().supports(layer) and _depthwise_supported(layer)

  def kernel_variables(self, layer: Any) -> List[Any]:
    return [layer.depthwise_kernel, layer.pointwise_kernel]

  def prepare(self, layer: Any, tap: taps_lib.Tap, out_grad: tf.Tensor,
              records: linear.Records) -> "SeparableState":
    x = tf.cast(tf.convert_to_tensor(tap.args[0]), out_grad.dtype)
    u = _depthwise(layer, layer.depthwise_kernel, x)
    pointwise = tf.reshape(layer.pointwise_kernel,
                           layer.pointwise_kernel.shape[-2:])
    g_u = tf.reshape(
        tf.matmul(tf.reshape(out_grad, [-1, out_grad.shape[-1]]), pointwise,
                  transpose_b=True), tf.shape(u))
    biases = None
    if self.has_bias(layer):
      # Kept for clipped_sums: the bias's clipped sum is their weighted sum.
      biases = linear.bias_grads(out_grad, layer.bias.shape, records)
    return SeparableState(layer, records, x, out_grad, u, g_u, biases)

  def prepare_calls(self, layer: Any, taps: Sequence[taps_lib.Tap],
                    out_grads: Sequence[Any],
                    records: linear.Records) -> "SeparableState":
    raise linear.FastPathUnavailable(
        f"layer {layer.name!r} is called {len(taps)} times in one forward "
        "pass")

  def sq_norms(self, state: "SeparableState") -> List[tf.Tensor]:
    layer, records = state.layer, state.records
    a, g = _depthwise_rows(layer, layer.depthwise_kernel, state.x,
                           state.g_u, records)
    norms = [linear.kernel_sq_norms(a, g, records),
             linear.kernel_sq_norms(linear.per_record(state.u, records),
                                    linear.per_record(state.g, records),
                                    records)]
    if state.bias_grads is not None:
      norms.append(linear.exact_sq_norms(state.bias_grads))
    return norms

  def clipped_sums(self, state: "SeparableState", scales: List[tf.Tensor],
                   keep: tf.Tensor) -> List[tf.Tensor]:
    layer, records = state.layer, state.records
    x, u = (linear.per_example(t, records, keep) for t in (state.x, state.u))
    g, g_u = (linear.per_example(t, records, keep)
              for t in (state.g, state.g_u))
    scaled = lambda t, s: linear.per_example(t, records, s)
    out = [_depthwise_sum(layer, layer.depthwise_kernel, x,
                          scaled(g_u, scales[0])),
           tf.reshape(linear.matmul_kernel_sum(u, scaled(g, scales[1])),
                      tf.shape(layer.pointwise_kernel))]
    if len(scales) > 2 and state.bias_grads is not None:
      bias = linear.mask(state.bias_grads, keep)
      out.append(tf.tensordot(scales[2], bias, axes=[[0], [0]]))
    return out


@dataclasses.dataclass(frozen=True)
class SeparableState:
  """A separable convolution's call: its input ``x`` and output gradient
  ``g``, the depthwise output ``u`` recomputed from ``x`` and its gradient
  ``g_u``, and the per-record bias gradients (None without a bias)."""
  layer: Any
  records: linear.Records
  x: tf.Tensor
  g: tf.Tensor
  u: tf.Tensor
  g_u: tf.Tensor
  bias_grads: Optional[tf.Tensor] = None


class Conv2DTransposeRule(linear.LinearRule):
  """keras.layers.Conv2DTranspose (no output_padding, no dilation).

  ``z = conv_transpose(x, W)`` is the adjoint of a convolution with kernel
  W, so W's gradient is that convolution's kernel gradient with the roles
  of input and output swapped: rows are patches of the output gradient g
  and the per-position "output gradients" are the inputs x.
  """

  def supports(self, layer: Any) -> bool:
    return (super().supports(layer) and _channels_last(layer)
            and len(layer.kernel_size) == 2
            and str(layer.padding).lower() in ("valid", "same")
            and getattr(layer, "output_padding", None) is None
            and max(layer.dilation_rate) == 1)

  def kernel_rows(self, layer: Any, x: tf.Tensor, g: tf.Tensor,
                  records: linear.Records) -> Tuple[tf.Tensor, tf.Tensor]:
    ks, st = list(layer.kernel_size), list(layer.strides)
    a = _patches(g, ks, st, [1, 1], _padding(layer))  # [B, T_x, kh*kw*F]
    x = linear.example_rows(x, [x.shape[-1]])
    return linear.per_record(a, records), linear.per_record(x, records)

  def kernel_sum(self, layer: Any, x: tf.Tensor, g: tf.Tensor) -> tf.Tensor:
    return _backprop_filter(g, list(layer.kernel.shape), x,
                            list(layer.strides), _padding(layer), [1, 1])


def register_all(register: rule_types.Register,
                 modules: Sequence[Any]) -> None:
  """Registers these rules for the layer classes of each Keras module."""
  for keras in modules:
    layers = keras.layers
    for name in ("Conv1D", "Conv2D", "Conv3D"):
      register(getattr(layers, name), ConvRule())
    register(layers.DepthwiseConv2D, DepthwiseConv2DRule())
    register(layers.SeparableConv2D, SeparableConv2DRule())
    register(layers.Conv2DTranspose, Conv2DTransposeRule())
