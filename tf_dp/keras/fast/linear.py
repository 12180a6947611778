"""Per-record norms and clipped sums of a kernel used linearly: z = a W.

A record r groups ``m`` examples (m = 1 without microbatches). A layer whose
output is linear in its kernel is described, for the norms, by per-record
rows of inputs ``a`` (``[R * G, m * T, K]``) and output gradients ``g``
(``[R * G, m * T, C]``), where T counts positions (sequence steps, image
patches) and G independent groups of the kernel (grouped and depthwise
convolutions, batched einsum axes; G = 1 for Dense). The record's gradient
of group j is ``A_rj^T G_rj`` and

    ||A^T G||_F^2 = sum((A A^T) * (G G^T))                      (ghost norm)

(Goodfellow 2015 for T = 1; Li, Tramer, Liang & Hashimoto 2021 for
sequences). The ghost norm costs ~ T^2 (K + C) per record and group (in
float64: see "Certified norms" below); the materialised gradient ~ T K C.
Each layer takes the cheaper one, per layer and input shape (Bu et al.
2023, "book-keeping"). Either way the norm is certified: never below the
norm of what the record adds to the clipped sum, for any input.

The clipped sum needs no per-record gradients: it is linear in the output
gradients, so ``sum_r s_r grad_r`` is the layer's ordinary kernel gradient
with each record's output gradient scaled by ``s_r``, computed by the op
TensorFlow itself would use (matmul, Conv2DBackpropFilter, ...). A rule
that materialised the per-record gradients for their norms may form the
sum from them instead (``keeps_gradients``).

Only rank-3 matmuls are built (TF 2.21's oneDNN corrupts some rank-4 x
rank-2 matmuls: see the shared TF facts).
"""

import contextlib
import dataclasses
from typing import (Any, Iterator, List, Optional, Protocol, Sequence, Tuple,
                    Union)

import numpy as np
import tensorflow as tf

from tf_dp.dp_query import xla_context
from tf_dp.keras.fast import taps as taps_lib

# A number of records: a Python int when known at trace time, else a scalar
# int32 tensor.
Records = Union[int, tf.Tensor]


class FastPathUnavailable(Exception):
  """Raised at trace time when the model or query needs the fallback."""


# Record counts (``records.ref()``) known to count one example per record
# (no microbatches), while ``one_example_per_record`` is open.
_ONE_EXAMPLE_RECORDS: set = set()


@contextlib.contextmanager
def one_example_per_record(records: Records) -> Iterator[None]:
  """Within, reshapes by ``records`` (a tensor counting records of one
  example each) keep each record's static size when the batch size is
  unknown (``dataset.batch(n)`` without ``drop_remainder``, a partial last
  batch of arrays): rules choose their method (ghost norm, materialised or
  kept gradients) from those sizes."""
  key = records.ref() if isinstance(records, tf.Tensor) else None
  if key is not None:
    _ONE_EXAMPLE_RECORDS.add(key)
  try:
    yield
  finally:
    _ONE_EXAMPLE_RECORDS.discard(key)


def _with_record_size(rows: tf.Tensor, records: Records,
                      size: Optional[int]) -> tf.Tensor:
  """``rows`` ``[R, ?, F]`` with static dim 1 ``size`` when ``records``
  counts one example per record (the reshape could not infer it)."""
  if (rows.shape[1] is None and size is not None
      and isinstance(records, tf.Tensor)
      and records.ref() in _ONE_EXAMPLE_RECORDS):
    rows.set_shape([None, size, rows.shape[2]])
  return rows


def example_rows(t: tf.Tensor, trailing: Sequence[int]) -> tf.Tensor:
  """``[B, *positions, C]`` -> ``[B, P, *trailing]`` (``trailing``'s
  product is C): each example's positions as one axis, of static size P
  when they are static, whatever the batch size."""
  t = tf.convert_to_tensor(t)
  positions = t.shape[1:-1].num_elements()
  if positions is None:
    return tf.reshape(t, [tf.shape(t)[0], -1] + list(trailing))
  return tf.reshape(t, [-1, positions] + list(trailing))


def per_record(t: tf.Tensor, records: Records) -> tf.Tensor:
  """[B, ..., d] -> [R, (B / R) * prod(...), d]."""
  t = tf.convert_to_tensor(t)
  return _with_record_size(tf.reshape(t, [records, -1, tf.shape(t)[-1]]),
                           records, t.shape[1:-1].num_elements())


def record_mass(mass: tf.Tensor, records: Records) -> tf.Tensor:
  """``[R]``: the sum over each record's blocks of ``mass`` ``[R * G]``."""
  return tf.reduce_sum(tf.reshape(mass, [records, -1]), 1)


def product_error(mass: tf.Tensor, factor: tf.Tensor,
                  terms: Union[int, tf.Tensor]) -> tf.Tensor:
  """``[R]`` float64 bound on the norm of the rounding error of a record's
  gradient computed from float32 rows ``y_t = s x_t M`` (or ``s g_t M^T``)
  instead of exact ones: ``gamma_{terms + 1} |s| |M|_F U``, ``U = sum_t
  |x_t| |g_t|`` the record's mass over the rows ``M`` multiplies (each
  row's error is within ``gamma_{terms + 1} |s| |x_t| |M|_F``: Higham Sec.
  3.1 per element, Cauchy-Schwarz over the row; the gradient sums
  ``|x_t| |g_t|``-weighted rows). ``factor`` is ``|s| |M|_F`` (float64).
  """
  return rounding_bound(terms + 1, UNIT_ROUNDOFF_FLOAT32) * factor * mass


def mask(t: tf.Tensor, keep: tf.Tensor) -> tf.Tensor:
  """Zeros the rows (leading axis) of ``t`` where ``keep`` is false.

  Nearly every batch keeps every record: the select over the whole tensor
  then runs only when some record is dropped.
  """
  t = tf.convert_to_tensor(t)

  def masked() -> tf.Tensor:
    if t.shape.rank is not None:
      shape = [-1] + [1] * (t.shape.rank - 1)
    else:
      shape = tf.concat([tf.shape(keep), tf.ones([tf.rank(t) - 1], tf.int32)],
                        0)
    return tf.where(tf.reshape(keep, shape), t, tf.zeros_like(t))

  return tf.cond(tf.reduce_all(keep), lambda: tf.identity(t), masked)


def per_example(t: tf.Tensor, records: Records,
                per_record_values: tf.Tensor) -> tf.Tensor:
  """Multiplies example rows of ``t`` by their record's value (or keeps
  them where the value is boolean true, zeroing the others)."""
  t = tf.convert_to_tensor(t)
  if t.shape[1:].is_fully_defined():
    # Static sizes: no shape arithmetic in the step's graph.
    shape = [-1] + t.shape[1:].as_list()
    grouped = tf.reshape(t, [records, -1] + shape[1:])
    ones = [1] * len(shape)
  else:
    shape = tf.shape(t)
    grouped = tf.reshape(t, tf.concat([[records, -1], shape[1:]], 0))
    ones = tf.ones([tf.rank(grouped) - 1], tf.int32)
  if per_record_values.dtype == tf.bool:
    grouped = mask(grouped, per_record_values)
  else:
    values = tf.reshape(tf.cast(per_record_values, t.dtype),
                        tf.concat([[records], ones], 0))
    grouped = grouped * values
  return tf.reshape(grouped, shape)


def grouped_rows(t: tf.Tensor, records: Records) -> tf.Tensor:
  """[B, T, G, F] -> [R * G, m * T, F]: rows of one record and group."""
  t = tf.convert_to_tensor(t)
  positions, groups, features = t.shape[1], t.shape[2], t.shape[3]
  if groups == 1:
    return _with_record_size(tf.reshape(t, [records, -1, features]),
                             records, positions)
  t = tf.reshape(t, [records, -1, tf.shape(t)[1], groups, features])
  t = tf.transpose(t, [0, 3, 1, 2, 4])
  return _with_record_size(
      tf.reshape(t, [-1, tf.shape(t)[2] * tf.shape(t)[3], features]),
      records, positions)


def use_ghost_sizes(t: int, k: int, c: int) -> bool:
  """True if the ghost norm costs no more than the materialised gradient for
  t positions, k inputs and c outputs: ~ 2 t^2 (k + c) (its Gram matrices
  are float64, about twice the cost of float32) against ~ t k c. A tie
  (e.g. t = 128, k = c = 512) goes to the ghost norm, whose temporaries
  (t^2 per record) are smaller than a record's k c gradient there."""
  return 2 * t * t * (k + c) <= t * k * c


def use_ghost(a: tf.Tensor, g: tf.Tensor) -> bool:
  """True if the ghost norm is cheaper than the materialised gradient."""
  t, k, c = a.shape[1], a.shape[2], g.shape[2]
  if t is None or k is None or c is None:
    return True
  return use_ghost_sizes(t, k, c)


# Certified norms.
#
# A record's norm sets its clip scale, so it must never be below the norm of
# what the record adds to the clipped sum, whatever the input: an adversary
# who contributes one example may choose it. The ghost identity sums
# products that can cancel: rows ``v`` and ``d - v`` with ``|v| = 1e6`` give
# a float32 ghost value <= 0 for a gradient of norm ``|d| |g|``. So:
#
# * Gram matrices and their products are formed in float64 from the float32
#   rows (an exact cast), and Higham's bound on their rounding (Accuracy and
#   Stability of Numerical Algorithms, 2002, Sec. 3.1: any sum of n terms
#   in any order is within ``gamma_n = n u / (1 - n u)`` times the sum of
#   their absolute values) is added: every ``|a_i . a_j| |g_i . g_j|`` is at
#   most ``|a_i| |a_j| |g_i| |g_j|``, so with ``U = sum_t |a_t| |g_t|`` the
#   exact squared norm is at most the computed one plus
#   ``gamma_{K + C + T^2 + 8}(float64) U^2``.
# * The clipped sum itself is formed in float32 from the scaled rows (a
#   matmul or a convolution's kernel gradient), not from the norm: what a
#   record adds differs from its exact gradient by at most
#   ``gamma_{mT}(float32) U`` when its own mT terms are summed (Higham
#   again, with ``|a_t g_t^T|_F = |a_t| |g_t|``), which is added to the norm.
# * ``U / norm`` measures how much a record's position terms cancel: about
#   sqrt(mT) for terms in random directions, far more for crafted ones,
#   whose large intermediate partial sums would make float32 rounding of
#   other terms part of their contribution. The norm is floored at
#   ``U / (LEVERAGE sqrt(mT))``, so no partial sum of a record's scaled
#   terms exceeds ``LEVERAGE sqrt(mT) C``.
#
# Records whose bound is not finite (overflow) are dropped by the caller:
# they contribute zeros. On ordinary data the added terms change norms by
# about ``u (mT)^1.5`` relative (3e-5 at mT = 64, 2e-3 at mT = 1024).
UNIT_ROUNDOFF_FLOAT32 = 2.0 ** -24
UNIT_ROUNDOFF_FLOAT64 = 2.0 ** -53
LEVERAGE = 64.0
# float64 -> float32 rounds to nearest: the bound is raised by this relative
# margin first (it also covers the few float64 roundings of the bound).
_CAST_MARGIN = 2.0 ** -20


def float32_upper_bound(value: tf.Tensor) -> tf.Tensor:
  """A float64 bound ``value >= 0`` cast to float32 without going below it
  (raised by ``_CAST_MARGIN``; a positive value under float32's smallest
  normal number becomes that number; overflow gives inf)."""
  out = tf.cast(value * (1.0 + _CAST_MARGIN), tf.float32)
  tiny = tf.constant(np.finfo(np.float32).tiny, tf.float32)
  return tf.where((value > 0) & (out < tiny), tiny, out)


def rounding_bound(terms: Union[int, tf.Tensor],
                   unit_roundoff: float) -> Union[float, tf.Tensor]:
  """Higham's ``gamma_n = n u / (1 - n u)`` for ``n = terms`` (float64;
  ``terms`` may be a tensor). A Python int gives a Python float, the same
  float64 arithmetic with no op in the graph."""
  if isinstance(terms, (int, np.integer)):
    nu = float(terms) * unit_roundoff
    return nu / (1.0 - nu)
  nu = tf.cast(terms, tf.float64) * unit_roundoff
  return nu / (1.0 - nu)


def dim(t: tf.Tensor, axis: int) -> Union[int, tf.Tensor]:
  """Size of ``t`` along ``axis``: a Python int when known at trace time
  (sums of sizes then stay Python ints: fewer ops in the step's graph),
  else a scalar tensor."""
  size = t.shape[axis]
  return int(size) if size is not None else tf.shape(t)[axis]


def euclidean_norms(t: tf.Tensor, axis: int) -> tf.Tensor:
  """Euclidean norms of ``t`` along ``axis``, in its dtype: a sum of squares
  in some order, then a square root. One fused kernel (EuclideanNorm,
  without the squares as a temporary) except under XLA, which has no
  kernel for it."""
  if xla_context.in_xla_context():
    return tf.sqrt(tf.reduce_sum(tf.square(t), axis))
  return tf.math.reduce_euclidean_norm(t, axis)


def row_norms(t: tf.Tensor) -> tf.Tensor:
  """``[..., F] -> [...]``: Euclidean norms of the last axis, in the dtype
  of ``t`` (float32 rows: use ``position_mass``, which bounds their
  rounding)."""
  return euclidean_norms(t, -1)


def position_mass(a: tf.Tensor, g: tf.Tensor) -> tf.Tensor:
  """``U = sum_t |a_t| |g_t|`` per row group: ``[N]`` float64 upper bounds
  for rows ``[N, T, K]`` and ``[N, T, C]`` (float64 rows: computed in
  float64; float32 rows: in float32, within ``gamma_n``, ``n = K + C + T
  + 8``, of exact (sums of positive terms, a square root and a product),
  so raised by ``1 + gamma_2n >= 1 / (1 - gamma_n)``; inf on overflow,
  which drops the record)."""
  mass = tf.reduce_sum(row_norms(a) * row_norms(g), 1)
  if mass.dtype == tf.float64:
    return mass
  terms = 2 * (dim(a, 2) + dim(g, 2) + dim(a, 1) + 8)
  return tf.cast(mass, tf.float64) * (
      1.0 + rounding_bound(terms, UNIT_ROUNDOFF_FLOAT32))


def certified_sq_norms(exact_sq_bound: tf.Tensor, mass: tf.Tensor,
                       rows_per_record: Union[int, tf.Tensor], records: Records,
                       input_error: Optional[tf.Tensor] = None) -> tf.Tensor:
  """``[R]`` float32 squared norms that bound what each record adds.

  Args:
    exact_sq_bound: ``[R * G]`` float64 upper bounds on the squared norm of
      each (record, group) block of the exact gradient.
    mass: ``[R * G]`` float64 ``U`` of each block (``position_mass``).
    rows_per_record: positions of one record summed per block (``m T``).
    records: ``R``.
    input_error: optional ``[R]`` float64 bounds on the norm of the
      difference between the record's gradient and the gradient computed
      from its float32 rows (rows that are themselves rounded products,
      e.g. LoRA's ``g b^T``): added to the norm.
  """
  exact = tf.reduce_sum(tf.reshape(exact_sq_bound, [records, -1]), 1)
  mass = tf.sqrt(tf.reduce_sum(tf.reshape(tf.square(mass), [records, -1]),
                               1))
  norm = (tf.sqrt(tf.maximum(exact, 0.0))
          + rounding_bound(rows_per_record, UNIT_ROUNDOFF_FLOAT32) * mass)
  if input_error is not None:
    norm += input_error
  if isinstance(rows_per_record, (int, np.integer)):
    # A correctly rounded float64 square root, as tf.sqrt's.
    floor = LEVERAGE * np.sqrt(np.float64(rows_per_record))
  else:
    floor = LEVERAGE * tf.sqrt(tf.cast(rows_per_record, tf.float64))
  # No rows (a reverse embedding never called in reverse): the gradient and
  # U are 0, and so is the norm; 0 / 0 would be NaN and drop every record.
  norm = tf.maximum(norm, tf.math.divide_no_nan(mass, floor))
  return float32_upper_bound(tf.square(norm))


def ghost_sq_bound(a: tf.Tensor, b: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
  """``([N] bound, [N] U)``: float64 upper bounds on ``|A^T B|_F^2 =
  sum((A A^T) * (B B^T))`` for rows ``a`` ``[N, T, K]`` and ``b`` ``[N, T,
  C]`` (float64 Gram matrices plus their rounding bound), and ``U``."""
  a64, b64 = tf.cast(a, tf.float64), tf.cast(b, tf.float64)
  aa = tf.matmul(a64, a64, transpose_b=True)
  bb = tf.matmul(b64, b64, transpose_b=True)
  value = tf.reduce_sum(aa * bb, axis=[1, 2])
  t = dim(a, 1)
  terms = dim(a, 2) + dim(b, 2) + t * t + 8
  # U from the Gram matrices' diagonals (|a_t|^2, |b_t|^2: float64 sums of
  # squares of non-negative terms, within a relative gamma_n, n = K + C + T
  # + 8, of exact with the square roots and the sum), raised so that it is
  # never below the exact value: computed = exact (1 + e), |e| <= gamma_n,
  # so exact <= computed / (1 - gamma_n) <= computed (1 + gamma_{2n}) (and
  # the product's own rounding is inside the 8 spare terms). No second
  # float64 pass over the rows.
  n = dim(a, 2) + dim(b, 2) + t + 8
  mass = tf.reduce_sum(tf.sqrt(tf.linalg.diag_part(aa)
                               * tf.linalg.diag_part(bb)), 1) * (
                                   1.0 + rounding_bound(
                                       2 * n, UNIT_ROUNDOFF_FLOAT64))
  return tf.maximum(value, 0.0) + rounding_bound(
      terms, UNIT_ROUNDOFF_FLOAT64) * tf.square(mass), mass


def exact_sq_norms(per_record: tf.Tensor) -> tf.Tensor:
  """``[R]`` float32 squared norms of materialised per-record gradients
  ``[R, ...]`` that are themselves what the records add to the sum (their
  clipped sum is ``sum_r s_r per_record[r]``): float64 sums of squares,
  raised by the cast margin."""
  flat = tf.reshape(tf.cast(per_record, tf.float64),
                    [tf.shape(per_record)[0], -1])
  return float32_upper_bound(tf.reduce_sum(tf.square(flat), 1))


def materialised_sq_bound(grads: tf.Tensor, mass: tf.Tensor,
                          positions: Union[int, tf.Tensor]) -> tf.Tensor:
  """``[N]`` float64 upper bounds on the squared norms of exact gradients
  given their float32 products ``grads`` ``[N, K, C]`` over ``positions``
  positions (each within ``gamma_positions * mass`` of the exact one).

  The norm of ``grads`` runs in float32 in two stages of fused Euclidean
  norms, over C, then over K (squares of the first stage's norms), so the
  computed square is within ``gamma_n``, ``n = K + C + 8``, of the exact
  sum of squares whatever the order inside a stage (C squares and sums, a
  square root, a square, K sums, a square root, the float64 square);
  exact <= computed / (1 - gamma_n) <= computed (1 + gamma_2n). The bound
  is also above the squared norm of ``grads`` itself.
  """
  norm = euclidean_norms(euclidean_norms(grads, 2), 1)
  terms = 2 * (dim(grads, 1) + dim(grads, 2) + 8)
  norm = tf.sqrt(tf.square(tf.cast(norm, tf.float64)) * (
      1.0 + rounding_bound(terms, UNIT_ROUNDOFF_FLOAT32)))
  norm += rounding_bound(positions, UNIT_ROUNDOFF_FLOAT32) * mass
  return tf.square(norm)


# Kept per-record gradients may take at most this many times the memory of
# the layer's input and output gradient, which the clipped sum from the
# layer's own kernel-gradient op keeps until the scales are known.
KEPT_GRADIENTS_FACTOR = 4


def keeps_gradients(a: tf.Tensor, g: tf.Tensor,
                    held_per_example: Optional[int]) -> bool:
  """True if the per-record gradients ``A_r^T G_r`` of one-group rows ``a``
  ``[R, T, K]`` and ``g`` ``[R, T, C]`` (T > 1) are cheaper to materialise
  than their ghost norms (``use_ghost``) and small enough to keep for the
  clipped sum (``kept_gradients``): ``K C`` at most ``KEPT_GRADIENTS_FACTOR``
  times ``held_per_example``, the elements of one example's layer input and
  output gradient (None if not static: not kept). They live until every
  layer's norms are known, as those tensors would."""
  if held_per_example is None or a.shape[1] == 1 or use_ghost(a, g):
    return False
  return a.shape[2] * g.shape[2] <= KEPT_GRADIENTS_FACTOR * held_per_example


def _materialised_gradients(
    a: tf.Tensor, g: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
  """``([R * G, K, C] A^T G, [R * G] bound, [R * G] U)`` for rows ``a``
  ``[R * G, T, K]`` and ``g`` ``[R * G, T, C]`` of one dtype: the float32
  gradients of each (record, group) block, float64 upper bounds on the
  squared norms of their exact values (``materialised_sq_bound``) and
  ``position_mass``."""
  grads = tf.matmul(a, g, transpose_a=True)
  mass = position_mass(a, g)
  return grads, materialised_sq_bound(grads, mass, dim(a, 1)), mass


def kept_gradients(a: tf.Tensor, g: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
  """``([R] squared norms, [R, K, C] gradients)`` for one-group rows ``a``
  ``[R, T, K]``, ``g`` ``[R, T, C]``: the float32 per-record gradients,
  for a clipped sum ``sum_r s_r grad_r`` (a product with the scales
  instead of a kernel-gradient op over the scaled batch), and norms that
  bound both what each record then adds (the float32 gradient) and its
  exact gradient (``materialised_sq_bound``)."""
  grads, bound, _ = _materialised_gradients(tf.cast(a, g.dtype), g)
  return float32_upper_bound(bound), grads


def kernel_sq_norms(a: tf.Tensor, g: tf.Tensor, records: Records,
                    input_error: Optional[tf.Tensor] = None) -> tf.Tensor:
  """``[R]`` certified squared norms of ``sum_groups A^T G`` per record
  (see "Certified norms" above): never below the norm of what the record
  adds to the float32 clipped sum of its kernel (plus ``input_error``, see
  ``certified_sq_norms``)."""
  a = tf.cast(a, g.dtype)
  rows = dim(a, 1)
  if a.shape[1] == 1:  # One position: |a^T g|^2 = |a|^2 |g|^2.
    mass = position_mass(a, g)
    bound = tf.square(mass)
  elif use_ghost(a, g):
    bound, mass = ghost_sq_bound(a, g)
  else:
    _, bound, mass = _materialised_gradients(a, g)
  return certified_sq_norms(bound, mass, rows, records, input_error)


def bias_grads(out_grad: tf.Tensor, bias_shape: Sequence[Optional[int]],
               records: Records) -> tf.Tensor:
  """``[R, *bias_shape]``: per-record gradients of a broadcast bias."""
  g = tf.convert_to_tensor(out_grad)
  rank = g.shape.rank
  bias_shape = list(bias_shape)
  lead = rank - 1 - len(bias_shape)
  axes = list(range(1, 1 + lead)) + [
      1 + lead + i for i, d in enumerate(bias_shape) if d == 1]
  g = tf.reduce_sum(g, axis=axes, keepdims=True) if axes else g
  return tf.reduce_sum(tf.reshape(g, [records, -1] + bias_shape), 1)


class KernelRule:
  """What rules of a layer with kernels (and an optional bias) share: the
  variables they account for, tapped before the activation."""

  pre_activation = True

  def supports(self, layer: Any) -> bool:
    return not (getattr(layer, "lora_enabled", False)
                or getattr(layer, "quantization_mode", None))

  def kernel(self, layer: Any) -> Any:
    return layer.kernel

  def kernel_variables(self, layer: Any) -> List[Any]:
    """The variables ``kernel_part`` accounts for (the kernel)."""
    return [self.kernel(layer)]

  def variables(self, layer: Any) -> List[Any]:
    out = list(self.kernel_variables(layer))
    if getattr(layer, "use_bias", True) and getattr(layer, "bias",
                                                    None) is not None:
      out.append(layer.bias)
    return out

  def has_bias(self, layer: Any) -> bool:
    return len(self.variables(layer)) > len(self.kernel_variables(layer))


class LinearRule(KernelRule):
  """Base rule for a kernel (and optional bias) with z = f(x, kernel) + b.

  Subclasses give ``kernel_rows(layer, x, g, records) -> (a, g)`` in the
  grouped-row layout above and ``kernel_sum(layer, x, g)``: the kernel
  gradient of the batch for output gradient g (already scaled per record).
  """

  def kernel_rows(self, layer: Any, x: tf.Tensor, g: tf.Tensor,
                  records: Records) -> Tuple[tf.Tensor, tf.Tensor]:
    raise NotImplementedError

  def kernel_sum(self, layer: Any, x: tf.Tensor, g: tf.Tensor) -> tf.Tensor:
    raise NotImplementedError

  def prepare(self, layer: Any, tap: taps_lib.Tap, out_grad: tf.Tensor,
              records: Records) -> "LinearState":
    x = tf.cast(tf.convert_to_tensor(tap.args[0]), out_grad.dtype)
    return self._state(layer, [(x, out_grad)], records)

  def prepare_calls(self, layer: Any, taps: Sequence[taps_lib.Tap],
                    out_grads: Sequence[tf.Tensor],
                    records: Records) -> "LinearState":
    """A layer called several times in one forward pass (a shared layer):
    a record's kernel gradient is the sum over calls of ``A_i^T G_i``,
    that is ``A^T G`` for the rows of every call concatenated along
    positions, whose ghost or materialised norm includes the cross terms
    between calls and is certified as for one call; the clipped sum adds
    each call's kernel sum."""
    return self._state(layer, [
        (tf.cast(tf.convert_to_tensor(tap.args[0]), grad.dtype), grad)
        for tap, grad in zip(taps, out_grads)], records)

  def _state(self, layer: Any, calls: List[Tuple[tf.Tensor, tf.Tensor]],
             records: Records) -> "LinearState":
    kernel = self.kernel_part(layer, calls, records)
    biases = None
    if self.has_bias(layer):
      # Kept for clipped_sums: the bias's clipped sum is their weighted sum.
      per_call = [bias_grads(g, layer.bias.shape, records) for _, g in calls]
      biases = per_call[0] if len(per_call) == 1 else tf.add_n(per_call)
    return LinearState(layer, kernel, biases)

  def kernel_part(self, layer: Any, calls: List[Tuple[tf.Tensor, tf.Tensor]],
                  records: Records) -> "KernelPart":
    """The norms and clipped sums of ``kernel_variables`` for the layer's
    ``calls`` (``(input, output gradient)`` each)."""
    if len(calls) == 1:
      x, g = calls[0]
      norms, grads = self.kernel_norms_and_grads(layer, x, g, records)
      return KernelCalls(self, layer, records, calls, norms, grads)
    rows = [self.kernel_rows(layer, x, g, records) for x, g in calls]
    a = tf.concat([tf.cast(r[0], r[1].dtype) for r in rows], 1)
    norms = kernel_sq_norms(a, tf.concat([r[1] for r in rows], 1), records)
    return KernelCalls(self, layer, records, calls, norms)

  def kernel_norms_and_grads(
      self, layer: Any, x: tf.Tensor, g: tf.Tensor,
      records: Records) -> Tuple[tf.Tensor, Optional[tf.Tensor]]:
    """``([R] squared norms, per-record kernel gradients or None)``.

    The norms are certified (see "Certified norms"). A rule that
    materialises each record's kernel gradient ``[R, *kernel.shape]`` may
    return it: the clipped sum is then formed from it, so each record adds
    exactly the gradient whose norm set its scale.
    """
    a, g = self.kernel_rows(layer, x, g, records)
    return kernel_sq_norms(a, g, records), None

  def kernel_sq_norms(self, layer: Any, x: tf.Tensor, g: tf.Tensor,
                      records: Records) -> tf.Tensor:
    """``[R]`` certified squared norms of each record's kernel gradient."""
    return self.kernel_norms_and_grads(layer, x, g, records)[0]

  def sq_norms(self, state: "LinearState") -> List[tf.Tensor]:
    norms = state.kernel.sq_norms()
    if state.bias_grads is not None:
      norms.append(exact_sq_norms(state.bias_grads))
    return norms

  def clipped_sums(self, state: "LinearState", scales: List[tf.Tensor],
                   keep: tf.Tensor) -> List[tf.Tensor]:
    parts = len(self.kernel_variables(state.layer))
    out = state.kernel.clipped_sums(scales[:parts], keep)
    if len(scales) > parts and state.bias_grads is not None:
      bias = mask(state.bias_grads, keep)
      out.append(tf.tensordot(scales[parts], bias, axes=[[0], [0]]))
    return out


class KernelPart(Protocol):
  """The kernel variables' share of a linear rule's state: per-record
  squared norms, and clipped sums formed from the tensors the norms
  bound."""

  def sq_norms(self) -> List[tf.Tensor]:
    """``[R]`` squared norms, one per kernel variable."""

  def clipped_sums(self, scales: List[tf.Tensor],
                   keep: tf.Tensor) -> List[tf.Tensor]:
    """Clipped sums, one per kernel variable."""


@dataclasses.dataclass(frozen=True)
class KernelCalls:
  """A kernel's calls (``(input, output gradient)`` each), their certified
  norms, and each record's kernel gradient where the rule materialised it
  for one call (the clipped sum is then formed from it)."""
  rule: LinearRule
  layer: Any
  records: Records
  calls: List[Tuple[tf.Tensor, tf.Tensor]]
  norms: tf.Tensor
  grads: Optional[tf.Tensor] = None

  def sq_norms(self) -> List[tf.Tensor]:
    return [self.norms]

  def clipped_sums(self, scales: List[tf.Tensor],
                   keep: tf.Tensor) -> List[tf.Tensor]:
    kernel = self.rule.kernel(self.layer)
    if self.grads is not None:
      total = tf.tensordot(scales[0], mask(self.grads, keep), axes=[[0], [0]])
    else:
      records = self.records
      sums = [self.rule.kernel_sum(
          self.layer, per_example(x, records, keep),
          per_example(per_example(g, records, keep), records, scales[0]))
              for x, g in self.calls]
      total = sums[0] if len(sums) == 1 else tf.add_n(sums)
    return [tf.reshape(total, tf.shape(kernel))]


@dataclasses.dataclass(frozen=True)
class LinearState:
  """A linear rule's state: the kernel part, and the per-record bias
  gradients ``[R, *bias.shape]`` (None without a bias)."""
  layer: Any
  kernel: KernelPart
  bias_grads: Optional[tf.Tensor] = None


def matmul_kernel_sum(x: tf.Tensor, g: tf.Tensor) -> tf.Tensor:
  """``sum over rows of x^T g`` for x [..., K], g [..., C] (rank-2 matmul)."""
  k, c = tf.shape(x)[-1], tf.shape(g)[-1]
  return tf.matmul(tf.reshape(x, [-1, k]), tf.reshape(g, [-1, c]),
                   transpose_a=True)
