"""Rules for embeddings: Embedding (with or without LoRA), embeddings used
more than once per forward pass, and position embeddings (KerasHub).

``ReversibleEmbeddingRule``: Keras 3's ``ReversibleEmbedding`` (KerasHub's
token embedding) is called forward on token ids (``E[ids]``) and, in causal
language models, in reverse on hidden states (logits ``h E^T``). With tied
weights one variable ``E`` serves both calls, and a record's gradient is
the sum of its uses:

    dE = sum_t onehot(id_t) g_t^T + sum_s dl_s h_s^T = A^T B,

with rows ``A = [onehot(ids); dl]`` (``[P, V]``) and ``B = [g; h]``
(``[P, D]``) over all ``P`` positions of every call. Its norm is the ghost
norm ``sum((A A^T) * (B B^T))`` (``linear.py``), where ``A A^T`` never
materialises a one-hot row: ``[id_s = id_t]`` between forward positions,
``dl_s[id_t]`` between a reverse and a forward position, ``dl dl^T``
between reverse positions. The cost is ``O(P^2 (V + D))`` per record and
no ``V x D`` gradient is formed per record. Certified as the linear rules'
(Gram matrices in float64 plus Higham's bound ``gamma_{V + D + P^2 + 8}
U^2``, ``U = sum_t |a_t| |b_t|``, and ``gamma_P U`` for the float32 sum).
The clipped sum is the layer's ordinary gradient with scaled output
gradients: a segment sum of ``g`` rows plus ``dl^T h``.

Untied weights (``tie_weights=False``) are two linear kernels: the forward
table as ``Embedding``'s rule, ``reverse_embeddings`` as a kernel ``h ->
logits``.

``PositionEmbeddingRule``: KerasHub's ``PositionEmbedding`` adds rows
``0..T-1`` of its table to every example: a record's gradient is its
output gradients summed over its examples, materialised (``[R, T, D]``).
"""

import dataclasses
from typing import Any, List, Optional, Sequence, Tuple

import tensorflow as tf

from tf_dp.keras.fast import einsum_rule
from tf_dp.keras.fast import linear
from tf_dp.keras.fast import rule_types
from tf_dp.keras.fast import taps as taps_lib


@dataclasses.dataclass(frozen=True)
class EmbeddingState:
  """An ``Embedding``'s calls: ids ``[R, P]`` and output gradients
  ``[R, P, D]`` per record; with LoRA, ``g_back`` (``g b^T``, scaled) and
  ``rows`` (``a[ids]``, scaled), else None."""
  layer: Any
  records: linear.Records
  ids: tf.Tensor
  g: tf.Tensor
  g_back: Optional[tf.Tensor] = None
  rows: Optional[tf.Tensor] = None


@dataclasses.dataclass(frozen=True)
class ReversibleEmbeddingState:
  """A ``ReversibleEmbedding``'s calls, per record: the forward calls' ids
  ``[R, T]`` and output gradients ``[R, T, D]``, the reverse calls' inputs
  ``h`` ``[R, S, D]`` and output gradients ``dl`` ``[R, S, V]``."""
  layer: Any
  records: linear.Records
  ids: tf.Tensor
  g: tf.Tensor
  h: tf.Tensor
  dl: tf.Tensor


# Positions per record up to which ``embedding_sq_norms`` takes the ghost
# norm (``O(P^2 D)`` per record); above, each record's gradient rows are
# materialised by token (``O(P D)``). Both are certified; they agree to
# rounding.
EMBEDDING_GHOST_MAX_POSITIONS = 16


def embedding_sq_norms(ids: tf.Tensor, g: tf.Tensor, records: linear.Records,
                       input_error: Optional[tf.Tensor] = None) -> tf.Tensor:
  """``[R]`` certified squared norms of ``sum_t onehot(id_t) g_t^T`` per
  record, certified as the linear rules' (``linear.py``, "Certified
  norms"; here ``|a_t| = 1``, so ``U = sum_t |g_t|``). ``ids`` ``[R, P]``,
  ``g`` ``[R, P, D]``.

  Up to ``EMBEDDING_GHOST_MAX_POSITIONS`` positions: the ghost norm
  ``sum_{s,t} [id_s = id_t] g_s . g_t``; above (or for an unknown ``P``),
  the record's nonzero gradient rows (one per distinct token) summed in
  float64 (``_token_rows_sq_bound``), which costs ``O(P D)`` instead of
  ``O(P^2 D)``.
  """
  positions = tf.shape(ids)[1]
  static = ids.shape[1]
  if static is not None and static <= EMBEDDING_GHOST_MAX_POSITIONS:
    bound, mass = _ghost_sq_bound(ids, g)
  else:
    bound, mass = _token_rows_sq_bound(ids, g)
  return linear.certified_sq_norms(bound, mass, positions, records,
                                   input_error)


def _ghost_sq_bound(ids: tf.Tensor,
                    g: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
  """``([R] bound, [R] U)``: float64 ghost norms ``sum_{s,t} [id_s = id_t]
  g_s . g_t`` plus Higham's bound ``gamma_{D + P^2 + 8} U^2``."""
  g64 = tf.cast(g, tf.float64)
  same = tf.cast(tf.equal(ids[:, :, None], ids[:, None, :]), tf.float64)
  value = tf.reduce_sum(same * tf.matmul(g64, g64, transpose_b=True), [1, 2])
  mass = tf.reduce_sum(linear.row_norms(g64), 1)
  positions = tf.shape(ids)[1]
  terms = tf.shape(g)[2] + positions * positions + 8
  bound = tf.maximum(value, 0.0) + linear.rounding_bound(
      terms, linear.UNIT_ROUNDOFF_FLOAT64) * tf.square(mass)
  return bound, mass


def _token_rows_sq_bound(ids: tf.Tensor,
                         g: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
  """``([R] bound, [R] U)``: float64 upper bounds on the squared norms of
  each record's gradient ``sum_t onehot(id_t) g_t^T``, from its rows.

  The row of token ``v`` is ``s_v = sum_{t: id_t = v} g_t`` (a float64 sum
  of at most P float32 rows, exact casts); the rows of all records come
  from one segment sum keyed by (record, token). Error bounds (Higham,
  Sec. 3.1): each computed element is within ``gamma_P`` times the sum of
  its terms' absolute values, so the computed rows are within ``gamma_P U``
  of the exact ones in norm (triangle inequality over positions); their
  computed sum of squares (at most ``D + P + 1`` roundings of nonnegative
  terms) is at least ``1 - gamma_{D + P + 4}`` times the exact one. So
  ``|grad| <= sqrt(computed / (1 - gamma_{D + P + 4})) + gamma_P U``.
  """
  records, positions = tf.shape(ids)[0], tf.shape(ids)[1]
  dim = tf.shape(g)[2]
  # Key (record, token) as one int64: token ids modulo 2^32 are distinct
  # for distinct int32 ids.
  span = tf.constant(2 ** 32, tf.int64)
  keys = (tf.range(tf.cast(records, tf.int64), dtype=tf.int64)[:, None] * span
          + tf.math.floormod(tf.cast(ids, tf.int64), span))
  unique_keys, segment = tf.unique(tf.reshape(keys, [-1]))
  g64 = tf.cast(g, tf.float64)
  rows = tf.math.unsorted_segment_sum(
      tf.reshape(g64, [-1, dim]), segment, tf.size(unique_keys))
  owner = tf.cast(tf.math.floordiv(unique_keys, span), tf.int32)
  sq = tf.math.unsorted_segment_sum(tf.reduce_sum(tf.square(rows), 1), owner,
                                    records)
  mass = tf.reduce_sum(linear.row_norms(g64), 1)
  norm = (tf.sqrt(sq / (1.0 - linear.rounding_bound(
      dim + positions + 4, linear.UNIT_ROUNDOFF_FLOAT64)))
          + linear.rounding_bound(positions, linear.UNIT_ROUNDOFF_FLOAT64)
          * mass)
  return tf.square(norm), mass


def embedding_sum(ids: tf.Tensor, g: tf.Tensor, vocabulary: int) -> tf.Tensor:
  """``[vocabulary, D]``: the rows of ``g`` ``[R, P, D]`` added at ``ids``."""
  return tf.math.unsorted_segment_sum(
      tf.reshape(g, [-1, tf.shape(g)[-1]]), tf.reshape(ids, [-1]), vocabulary)


class EmbeddingRule:
  """keras.layers.Embedding: norms from ``embedding_sq_norms`` (the ghost
  norm over positions with equal tokens for short sequences, per-token rows
  for long ones).

  With LoRA (Keras 3 ``enable_lora``: table ``E0 + s a b``, ``E0``
  frozen) a record's gradients are ``s onehot^T g b^T`` for ``a`` (an
  embedding gradient with output gradient ``g' = s g b^T``) and ``s
  a[ids]^T g`` for ``b`` (a linear kernel gradient of the rows ``s
  a[ids]``); ``g'`` and ``s a[ids]`` are formed once per record and the
  clipped sums from the same tensors, so the certificates hold for what
  each record adds.
  """

  pre_activation = False

  def supports(self, layer: Any) -> bool:
    return not getattr(layer, "quantization_mode", None)

  def variables(self, layer: Any) -> List[Any]:
    if einsum_rule.lora_enabled(layer):
      return [layer.lora_embeddings_a, layer.lora_embeddings_b]
    return [layer.embeddings]

  def prepare(self, layer: Any, tap: taps_lib.Tap, out_grad: Any,
              records: linear.Records) -> EmbeddingState:
    ids = tf.reshape(tf.cast(tap.args[0], tf.int32), [records, -1])
    g = linear.per_record(out_grad, records)
    if not einsum_rule.lora_enabled(layer):
      return EmbeddingState(layer, records, ids, g)
    scale = layer.lora_alpha / layer.lora_rank
    a = tf.cast(layer.lora_embeddings_a, g.dtype)
    b = tf.cast(layer.lora_embeddings_b, g.dtype)
    return EmbeddingState(layer, records, ids, g,
                          g_back=scale * tf.einsum("rpd,kd->rpk", g, b),
                          rows=scale * tf.gather(a, ids))

  def prepare_calls(self, layer: Any, taps: Sequence[taps_lib.Tap],
                    out_grads: Sequence[Any],
                    records: linear.Records) -> EmbeddingState:
    """A shared embedding: every call's positions, concatenated."""
    if einsum_rule.lora_enabled(layer):
      raise linear.FastPathUnavailable(
          f"layer {layer.name!r} has LoRA and is called {len(taps)} times "
          "in one forward pass")
    states = [self.prepare(layer, tap, grad, records)
              for tap, grad in zip(taps, out_grads)]
    return EmbeddingState(layer, records,
                          tf.concat([s.ids for s in states], 1),
                          tf.concat([s.g for s in states], 1))

  def sq_norms(self, state: EmbeddingState) -> List[tf.Tensor]:
    ids, g, records = state.ids, state.g, state.records
    if state.g_back is None or state.rows is None:
      return [embedding_sq_norms(ids, g, records)]
    # g' and the rows are rounded products (``linear.product_error``):
    # onehot rows have norm 1, so the mass of g' is that of g.
    layer = state.layer
    scale = abs(layer.lora_alpha / layer.lora_rank)
    b64 = tf.cast(layer.lora_embeddings_b, tf.float64)
    mass = linear.record_mass(tf.reduce_sum(linear.row_norms(
        tf.cast(g, tf.float64)), 1), records)
    error_a = linear.product_error(mass, scale * tf.norm(b64),
                                   b64.shape[-1])
    error_b = linear.rounding_bound(2, linear.UNIT_ROUNDOFF_FLOAT32) * (
        linear.position_mass(state.rows, g))
    return [embedding_sq_norms(ids, state.g_back, records, error_a),
            linear.kernel_sq_norms(state.rows, g, records, error_b)]

  def clipped_sums(self, state: EmbeddingState, scales: List[tf.Tensor],
                   keep: tf.Tensor) -> List[tf.Tensor]:
    layer, ids = state.layer, state.ids
    scaled = lambda t, s: linear.mask(t, keep) * s[:, None, None]
    if state.g_back is None or state.rows is None:
      return [embedding_sum(ids, scaled(state.g, scales[0]),
                            layer.input_dim)]
    return [embedding_sum(ids, scaled(state.g_back, scales[0]),
                          layer.input_dim),
            linear.matmul_kernel_sum(linear.mask(state.rows, keep),
                                     scaled(state.g, scales[1]))]


def _reverse_flag(tap: taps_lib.Tap) -> bool:
  """The call's ``reverse`` argument (positional or keyword)."""
  reverse = tap.kwargs.get("reverse", tap.args[1] if len(tap.args) > 1
                           else False)
  if tf.is_tensor(reverse):
    raise linear.FastPathUnavailable(
        f"layer {tap.layer.name!r} is called with a tensor 'reverse'")
  return bool(reverse)


def tied_sq_norms(ids: tf.Tensor, g: tf.Tensor, dl: tf.Tensor, h: tf.Tensor,
                  records: linear.Records) -> tf.Tensor:
  """``[R]`` certified squared norms of ``onehot(ids)^T g + dl^T h`` per
  record: ``ids`` ``[R, T]``, ``g`` ``[R, T, D]``, ``dl`` ``[R, S, V]``,
  ``h`` ``[R, S, D]`` (the module docstring)."""
  dl64 = tf.cast(dl, tf.float64)
  same = tf.cast(tf.equal(ids[:, :, None], ids[:, None, :]), tf.float64)
  cross = tf.gather(dl64, ids, axis=2, batch_dims=1)  # [R, S, T]
  aa = tf.concat([tf.concat([same, tf.transpose(cross, [0, 2, 1])], 2),
                  tf.concat([cross, tf.matmul(dl64, dl64,
                                              transpose_b=True)], 2)], 1)
  b64 = tf.cast(tf.concat([g, h], 1), tf.float64)
  value = tf.reduce_sum(aa * tf.matmul(b64, b64, transpose_b=True), [1, 2])
  mass = (tf.reduce_sum(linear.row_norms(tf.cast(g, tf.float64)), 1)
          + linear.position_mass(dl64, tf.cast(h, tf.float64)))
  positions = tf.shape(ids)[1] + tf.shape(dl)[1]
  terms = (tf.shape(dl)[2] + tf.shape(g)[2] + positions * positions + 8)
  bound = tf.maximum(value, 0.0) + linear.rounding_bound(
      terms, linear.UNIT_ROUNDOFF_FLOAT64) * tf.square(mass)
  return linear.certified_sq_norms(bound, mass, positions, records)


class ReversibleEmbeddingRule:
  """keras.layers.ReversibleEmbedding, called forward and/or in reverse
  any number of times (see the module docstring)."""

  pre_activation = False

  def supports(self, layer: Any) -> bool:
    return not (getattr(layer, "lora_enabled", False)
                or getattr(layer, "quantization_mode", None)
                or getattr(layer, "logit_soft_cap", None) is not None
                or getattr(layer, "reverse_dtype", None) not in (
                    None, "float32"))

  def variables(self, layer: Any) -> List[Any]:
    if layer.tie_weights:
      return [layer.embeddings]
    return [layer.embeddings, layer.reverse_embeddings]

  def prepare(self, layer: Any, tap: taps_lib.Tap, out_grad: Any,
              records: linear.Records) -> ReversibleEmbeddingState:
    return self.prepare_calls(layer, [tap], [out_grad], records)

  def prepare_calls(self, layer: Any, taps: Sequence[taps_lib.Tap],
                    out_grads: Sequence[Any],
                    records: linear.Records) -> ReversibleEmbeddingState:
    """State from every call of the layer in one forward pass."""
    ids, g, h, dl = [], [], [], []
    for tap, grad in zip(taps, out_grads):
      if _reverse_flag(tap):
        h.append(linear.per_record(tap.args[0], records))
        dl.append(linear.per_record(grad, records))
      else:
        ids.append(tf.reshape(tf.cast(tap.args[0], tf.int32), [records, -1]))
        g.append(linear.per_record(grad, records))
    dim, vocabulary = layer.output_dim, layer.input_dim
    empty = lambda width, dtype=tf.float32: tf.zeros([records, 0, width],
                                                     dtype)
    return ReversibleEmbeddingState(
        layer, records,
        ids=tf.concat(ids, 1) if ids else tf.zeros([records, 0], tf.int32),
        g=tf.concat(g, 1) if g else empty(dim),
        h=tf.concat(h, 1) if h else empty(dim),
        dl=tf.concat(dl, 1) if dl else empty(vocabulary))

  def sq_norms(self, state: ReversibleEmbeddingState) -> List[tf.Tensor]:
    ids, g, h, dl = state.ids, state.g, state.h, state.dl
    records = state.records
    if state.layer.tie_weights:
      return [tied_sq_norms(ids, g, dl, h, records)]
    return [embedding_sq_norms(ids, g, records),
            linear.kernel_sq_norms(h, dl, records)]

  def clipped_sums(self, state: ReversibleEmbeddingState,
                   scales: List[tf.Tensor],
                   keep: tf.Tensor) -> List[tf.Tensor]:
    layer = state.layer
    scaled = lambda t, s: linear.mask(t, keep) * s[:, None, None]
    forward = embedding_sum(state.ids, scaled(state.g, scales[0]),
                            layer.input_dim)
    h = linear.mask(state.h, keep)
    if layer.tie_weights:
      return [forward + linear.matmul_kernel_sum(
          scaled(state.dl, scales[0]), h)]
    return [forward, linear.matmul_kernel_sum(
        h, scaled(state.dl, scales[1]))]


class PositionEmbeddingRule:
  """keras_hub.layers.PositionEmbedding with the default start and
  positions: output row t is table row t for every example."""

  pre_activation = False

  def supports(self, layer: Any) -> bool:
    return True

  def variables(self, layer: Any) -> List[Any]:
    return [layer.position_embeddings]

  def prepare(self, layer: Any, tap: taps_lib.Tap, out_grad: Any,
              records: linear.Records) -> rule_types.PerRecordGradients:
    if tap.kwargs.get("start_index", 0) != 0 or tap.kwargs.get(
        "positions") is not None or len(tap.args) > 1:
      raise linear.FastPathUnavailable(
          f"layer {layer.name!r} is called with a start index or positions")
    g = tf.convert_to_tensor(out_grad)
    length = tf.shape(g)[-2]
    per_example = tf.reshape(g, [tf.shape(g)[0], -1, length, tf.shape(g)[-1]])
    # Rows of one example: sum over any axes between batch and sequence.
    per_example = tf.reduce_sum(per_example, 1)
    per_record = tf.reduce_sum(tf.reshape(
        per_example, [records, -1, length, tf.shape(g)[-1]]), 1)
    pad = layer.position_embeddings.shape[0] - length
    return rule_types.PerRecordGradients(
        [tf.pad(per_record, [[0, 0], [0, pad], [0, 0]])])

  def sq_norms(self, state: rule_types.PerRecordGradients
               ) -> List[tf.Tensor]:
    return [linear.exact_sq_norms(state.per_record[0])]

  def clipped_sums(self, state: rule_types.PerRecordGradients,
                   scales: List[tf.Tensor],
                   keep: tf.Tensor) -> List[tf.Tensor]:
    return [tf.tensordot(scales[0], linear.mask(state.per_record[0], keep),
                         axes=[[0], [0]])]


def register_all(register: rule_types.Register,
                 modules: Sequence[Any]) -> None:
  for keras in modules:
    reversible = getattr(keras.layers, "ReversibleEmbedding", None)
    if reversible is not None:
      register(reversible, ReversibleEmbeddingRule())


def register_keras_hub(register: rule_types.Register,
                       keras_hub: Any) -> None:
  register(keras_hub.layers.PositionEmbedding, PositionEmbeddingRule())
