"""Rules for convolutions, pooling, image operations and batch norm: the
examples' axis is the batch axis, axis 0 (also when interleaved by
``SpaceToBatchND``, as dilated convolutions do)."""

import numpy as np

from tf_dp.core.provenance.labels import Interleaved
from tf_dp.core.provenance.labels import Monomial
from tf_dp.core.provenance.labels import PUBLIC
from tf_dp.core.provenance.labels import Rows
from tf_dp.core.provenance.registry import all_outputs
from tf_dp.core.provenance.registry import constant
from tf_dp.core.provenance.registry import mixed
from tf_dp.core.provenance.registry import rank
from tf_dp.core.provenance.registry import register


# --------------------------------------------------------------------------
# Convolutions, pooling, images: the examples' axis is axis 0.


def _batch_first(*data_inputs):
  """A rule for operations whose ``data_inputs`` (indices) are laid out
  ``[batch, ...]`` and whose other inputs must be public."""
  def rule(op, inputs, forward):
    del forward
    layouts = set()
    for index, label in enumerate(inputs):
      if label is PUBLIC:
        continue
      if index not in data_inputs or not isinstance(
          label, (Rows, Interleaved)) or label.axis != 0:
        return all_outputs(op, mixed(op, f"{op.type} with input {index} laid out "
                               f"as {label}"))
      layouts.add(label)
    if len(layouts) != 1:
      return all_outputs(op, mixed(op, f"{op.type} of inputs laid out differently"))
    layout = layouts.pop()
    if isinstance(layout, Rows):
      layout = Rows(0, layout.group)
    return all_outputs(op, layout)
  return rule


register("Conv2D", "Conv3D", "DepthwiseConv2dNative", "Conv",
          "MaxPool", "AvgPool", "MaxPool3D", "AvgPool3D",
          "ResizeBilinear", "ResizeNearestNeighbor", "ResizeBicubic",
          "ResizeArea", "AdjustContrastv2", "AdjustHue", "AdjustSaturation",
          "RGBToHSV", "HSVToRGB", "LRN", "Dilation2D")(_batch_first(0))
register("MaxPoolV2")(_batch_first(0))
register("Conv2DBackpropInput", "DepthwiseConv2dNativeBackpropInput",
          "Conv3DBackpropInputV2")(_batch_first(2))
register("Conv2DBackpropInputV2")(_batch_first(0, 2))
register("AvgPoolGrad", "AvgPool3DGrad")(_batch_first(1))
register("MaxPoolGrad", "MaxPoolGradV2", "MaxPool3DGrad",
          "MaxPoolGradGrad", "LRNGrad")(_batch_first(0, 1, 2))
register("ResizeBilinearGrad", "ResizeBicubicGrad")(_batch_first(0, 1))
register("ResizeNearestNeighborGrad")(_batch_first(0))
register("ImageProjectiveTransformV2", "ImageProjectiveTransformV3")(
    _batch_first(0, 1))


@register("SpaceToBatchND")
def _space_to_batch(op, inputs, forward):
  """Blocks of each image's positions moved to the batch axis, block-major:
  row ``k * N + i`` is block ``k`` of example ``i``."""
  del forward
  label = inputs[0]
  block = constant(op.inputs[1])
  if not isinstance(label, Rows) or label.axis != 0 or label.group is None or (
      not label.group.is_one) or block is None or any(
          l is not PUBLIC for l in inputs[1:]):
    return all_outputs(op, mixed(op, "space-to-batch of rows that are not "
                           "examples"))
  return all_outputs(op, Interleaved(0, Monomial(int(np.prod(block)))))


@register("BatchToSpaceND")
def _batch_to_space(op, inputs, forward):
  """The inverse of ``SpaceToBatchND``."""
  del forward
  label = inputs[0]
  block = constant(op.inputs[1])
  if not isinstance(label, Interleaved) or label.axis != 0 or (
      block is None) or label.outer != Monomial(int(np.prod(block))) or any(
          l is not PUBLIC for l in inputs[1:]):
    return all_outputs(op, mixed(op, "batch-to-space of rows that are not "
                           "interleaved examples"))
  return all_outputs(op, Rows(0))


@register("BiasAdd", "BiasAddV1")
def _bias_add(op, inputs, forward):
  del forward
  if inputs[1] is not PUBLIC:
    return all_outputs(op, mixed(op, "a data-dependent bias"))
  return all_outputs(op, inputs[0])


def _channel_axis(op, rank_):
  return 1 if op.get_attr("data_format").decode() == "NCHW" else rank_ - 1


@register("FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3")
def _fused_batch_norm(op, inputs, forward):
  """Statistics per channel: over every axis but the channel axis in
  training mode (the batch's statistics), the given ones in inference.

  Examples stay apart if the statistics are given (public), or if the
  examples' axis is the channel axis: then each channel's statistics are
  one example's (tf-keras's LayerNormalization reshapes its input so).
  """
  label = inputs[0]
  r = rank(op.inputs[0])
  if not isinstance(label, Rows) or r is None:
    return all_outputs(op, mixed(op, "batch normalisation of unknown layout"))
  channel = _channel_axis(op, r)
  per_channel = Rows(0, label.group)
  if label.axis == channel:
    if any(l is not PUBLIC and l != per_channel for l in inputs[1:]):
      return all_outputs(op, mixed(op, "batch normalisation with statistics "
                             "laid out differently"))
    return [label] + [per_channel] * (len(op.outputs) - 1)
  if op.get_attr("is_training"):
    return all_outputs(op, mixed(op, "batch normalisation with the batch's "
                           "statistics", proven=forward))
  if any(l is not PUBLIC for l in inputs[1:]):
    return all_outputs(op, mixed(op, "batch normalisation with data-dependent "
                           "statistics"))
  return [label] + [PUBLIC] * (len(op.outputs) - 1)


@register("FusedBatchNormGrad", "FusedBatchNormGradV2",
           "FusedBatchNormGradV3")
def _fused_batch_norm_grad(op, inputs, forward):
  """The gradients of ``_fused_batch_norm``: per channel."""
  del forward
  grad, x = inputs[0], inputs[1]
  r = rank(op.inputs[1])
  layouts = [l for l in (grad, x) if l is not PUBLIC]
  if r is None or not all(isinstance(l, Rows) for l in layouts) or len(
      {l.axis for l in layouts}) != 1:
    return all_outputs(op, mixed(op, "a batch-norm gradient of unknown layout"))
  axis = layouts[0].axis
  per_channel = Rows(0, layouts[0].group)
  rest = inputs[2:]
  if axis == _channel_axis(op, r) and all(
      l is PUBLIC or l == per_channel for l in rest):
    return [layouts[0]] + [per_channel] * (len(op.outputs) - 1)
  if not op.get_attr("is_training") and all(l is PUBLIC for l in rest):
    return [layouts[0]] + [mixed(op, "a parameter gradient of batch "
                                  "normalisation")] * (len(op.outputs) - 1)
  return all_outputs(op, mixed(op, "the gradient of batch statistics"))
