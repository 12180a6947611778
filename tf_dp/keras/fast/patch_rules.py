"""Rule for patch embeddings: KerasHub's ``ViTPatchingAndEmbedding``.

The layer turns an image into a sequence: a convolution whose stride is its
kernel size embeds each patch (``patch_embedding``, a ``Conv2D``), a class
token (a ``[1, 1, D]`` variable, tiled over the batch) is put in front, and
rows of a position table (``position_embedding``, an ``Embedding`` called on
the constant ``position_ids``) are added:

    out[b, 0] = class_token + P[ids[0]]
    out[b, 1 + p] = conv(x)[b, p] + P[ids[1 + p]].

With ``g`` the gradient of the loss with respect to ``out``, a record's
gradients are, over the examples ``b`` of the record:

* class token: ``sum_b g[b, 0]`` (the gradient with respect to the input of
  that position: the token is added once per sequence);
* position table: ``sum_b g[b, t]`` added at row ``ids[t]``;
* convolution: its kernel and bias gradients for output gradient
  ``g[:, 1:]`` laid out as the convolution's output, from ``ConvRule``.

The first two are small (``D`` and ``T x D`` per record) and materialised:
each record adds exactly the tensors whose float64 sums of squares set its
norm (``linear.exact_sq_norms``). The convolution's norms are ``ConvRule``'s,
certified for what the record adds (``linear.py``, "Certified norms"). The
position table is not tapped on its own: its call's input is a constant
whose rows are not examples, so only this layer's rule can attribute its
gradient to records.
"""

import dataclasses
from typing import Any, List, Optional

import tensorflow as tf

from tf_dp.keras import backend
from tf_dp.keras.fast import conv_rules
from tf_dp.keras.fast import einsum_rule
from tf_dp.keras.fast import linear
from tf_dp.keras.fast import rule_types
from tf_dp.keras.fast import taps as taps_lib

_CONV = conv_rules.ConvRule()


@dataclasses.dataclass(frozen=True)
class PatchEmbeddingState:
  """Per record, the gradients of the trained parts (None: not trained):
  the class token's ``[R, 1, 1, D]``, the position table's ``[R, V, D]``,
  and the patch convolution's (``ConvRule``'s state)."""
  token: Optional[tf.Tensor]
  table: Optional[tf.Tensor]
  conv: Optional[linear.LinearState] = None


class ViTPatchingAndEmbeddingRule:
  """keras_hub's ``ViTPatchingAndEmbedding`` (channels_last, patches that
  tile the image: stride equal to the kernel size, valid padding; a class
  token or not; each of the class token, the patch convolution and the
  position table trained or frozen)."""

  pre_activation = False

  def supports(self, layer: Any) -> bool:
    conv = getattr(layer, "patch_embedding", None)
    table = getattr(layer, "position_embedding", None)
    if conv is None or table is None or getattr(
        layer, "data_format", None) != "channels_last":
      return False
    linear_activation = backend.for_object(conv).module().activations.linear
    return (conv.activation in (None, linear_activation)
            and list(conv.strides) == list(conv.kernel_size)
            and str(conv.padding).lower() == "valid"
            and _CONV.supports(conv)
            and not einsum_rule.lora_enabled(table)
            and not getattr(table, "quantization_mode", None))

  def _class_token(self, layer: Any) -> Any:
    token = getattr(layer, "class_token", None)
    if layer.use_class_token and token is not None and token.trainable:
      return token
    return None

  def _trains_conv(self, layer: Any) -> bool:
    return layer.patch_embedding.trainable and all(
        v.trainable for v in _CONV.variables(layer.patch_embedding))

  def _trains_table(self, layer: Any) -> bool:
    table = layer.position_embedding
    return table.trainable and table.embeddings.trainable

  def variables(self, layer: Any) -> List[Any]:
    out = []
    if self._class_token(layer) is not None:
      out.append(self._class_token(layer))
    if self._trains_conv(layer):
      out.extend(_CONV.variables(layer.patch_embedding))
    if self._trains_table(layer):
      out.append(layer.position_embedding.embeddings)
    return out

  def prepare(self, layer: Any, tap: taps_lib.Tap, out_grad: Any,
              records: linear.Records) -> PatchEmbeddingState:
    g = tf.convert_to_tensor(out_grad)
    start = 1 if layer.use_class_token else 0
    per_record = lambda t: tf.reduce_sum(tf.reshape(
        t, tf.concat([[records, -1], tf.shape(t)[1:]], 0)), 1)
    token = table_grads = None
    if self._class_token(layer) is not None:
      token = tf.reshape(per_record(g[:, 0]), [records, 1, 1, -1])
    if self._trains_table(layer):
      table = layer.position_embedding
      ids = tf.reshape(tf.cast(layer.position_ids, tf.int32), [-1])
      rows = tf.transpose(per_record(g), [1, 0, 2])  # [T, R, D]
      table_grads = tf.transpose(tf.math.unsorted_segment_sum(
          rows, ids, table.input_dim), [1, 0, 2])  # [R, V, D]
    if not self._trains_conv(layer):
      return PatchEmbeddingState(token, table_grads)
    conv = layer.patch_embedding
    x = tf.convert_to_tensor(tap.args[0])
    grid = [x.shape[1] // conv.kernel_size[0],
            x.shape[2] // conv.kernel_size[1]]
    if None in grid:
      grid = [tf.shape(x)[1] // conv.kernel_size[0],
              tf.shape(x)[2] // conv.kernel_size[1]]
    conv_grad = tf.reshape(g[:, start:], [tf.shape(g)[0], grid[0],
                                          grid[1], g.shape[-1]])
    return PatchEmbeddingState(token, table_grads, _CONV.prepare(
        conv, taps_lib.Tap(conv, (x,), {}, None), conv_grad, records))

  def sq_norms(self, state: PatchEmbeddingState) -> List[tf.Tensor]:
    out = []
    if state.token is not None:
      out.append(linear.exact_sq_norms(state.token))
    if state.conv is not None:
      out.extend(_CONV.sq_norms(state.conv))
    if state.table is not None:
      out.append(linear.exact_sq_norms(state.table))
    return out

  def clipped_sums(self, state: PatchEmbeddingState, scales: List[tf.Tensor],
                   keep: tf.Tensor) -> List[tf.Tensor]:
    scales = list(scales)
    materialised = lambda t, s: tf.tensordot(s, linear.mask(t, keep),
                                             axes=[[0], [0]])
    out = []
    if state.token is not None:
      out.append(materialised(state.token, scales.pop(0)))
    if state.conv is not None:
      parts = len(_CONV.variables(state.conv.layer))
      out.extend(_CONV.clipped_sums(state.conv, scales[:parts], keep))
      scales = scales[parts:]
    if state.table is not None:
      out.append(materialised(state.table, scales.pop(0)))
    return out


def register_keras_hub(register: rule_types.Register,
                       keras_hub: Any) -> None:
  """The rule for KerasHub's ViT patch embedding."""
  # pylint: disable=g-import-not-at-top
  from keras_hub.src.models.vit import vit_layers
  # pylint: enable=g-import-not-at-top
  register(vit_layers.ViTPatchingAndEmbedding, ViTPatchingAndEmbeddingRule())
