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
sequences). The ghost norm costs ~ T^2 (K + C) per record and group; the
materialised gradient ~ T K C. Each layer takes the cheaper one, per layer
and input shape (Bu et al. 2023, "book-keeping").

The clipped sum never needs per-record gradients: it is linear in the
output gradients, so ``sum_r s_r grad_r`` is the layer's ordinary kernel
gradient with each record's output gradient scaled by ``s_r``, computed by
the op TensorFlow itself would use (matmul, Conv2DBackpropFilter, ...).

Only rank-3 matmuls are built (TF 2.21's oneDNN corrupts some rank-4 x
rank-2 matmuls: see the shared TF facts).
"""

import tensorflow as tf


class FastPathUnavailable(Exception):
  """Raised at trace time when the model or query needs the fallback."""


def per_record(t, records):
  """[B, ..., d] -> [R, (B / R) * prod(...), d]."""
  t = tf.convert_to_tensor(t)
  return tf.reshape(t, [records, -1, tf.shape(t)[-1]])


def mask(t, keep):
  """Zeros the rows (leading axis) of ``t`` where ``keep`` is false.

  Nearly every batch keeps every record: the select over the whole tensor
  then runs only when some record is dropped.
  """
  t = tf.convert_to_tensor(t)

  def masked():
    shape = tf.concat([tf.shape(keep), tf.ones([tf.rank(t) - 1], tf.int32)],
                      0)
    return tf.where(tf.reshape(keep, shape), t, tf.zeros_like(t))

  return tf.cond(tf.reduce_all(keep), lambda: tf.identity(t), masked)


def per_example(t, records, per_record_values):
  """Multiplies example rows of ``t`` by their record's value (or keeps
  them where the value is boolean true, zeroing the others)."""
  t = tf.convert_to_tensor(t)
  shape = tf.shape(t)
  grouped = tf.reshape(t, tf.concat([[records, -1], shape[1:]], 0))
  if per_record_values.dtype == tf.bool:
    grouped = mask(grouped, per_record_values)
  else:
    rank = tf.rank(grouped)
    values = tf.reshape(tf.cast(per_record_values, t.dtype),
                        tf.concat([[records], tf.ones([rank - 1], tf.int32)],
                                  0))
    grouped = grouped * values
  return tf.reshape(grouped, shape)


def grouped_rows(t, records):
  """[B, T, G, F] -> [R * G, m * T, F]: rows of one record and group."""
  t = tf.convert_to_tensor(t)
  groups, features = t.shape[2], t.shape[3]
  if groups == 1:
    return tf.reshape(t, [records, -1, features])
  t = tf.reshape(t, [records, -1, tf.shape(t)[1], groups, features])
  t = tf.transpose(t, [0, 3, 1, 2, 4])
  return tf.reshape(t, [-1, tf.shape(t)[2] * tf.shape(t)[3], features])


def use_ghost_sizes(t, k, c):
  """True if the ghost norm (~ t^2 (k + c)) is cheaper than the materialised
  gradient (~ t k c) for t positions, k inputs and c outputs."""
  return t * t * (k + c) < t * k * c


def use_ghost(a, g):
  """True if the ghost norm is cheaper than the materialised gradient."""
  t, k, c = a.shape[1], a.shape[2], g.shape[2]
  if t is None or k is None or c is None:
    return True
  return use_ghost_sizes(t, k, c)


def kernel_sq_norms(a, g, records):
  """``[R]`` squared Frobenius norms of ``sum_groups A^T G`` per record."""
  a = tf.cast(a, g.dtype)
  if a.shape[1] == 1:  # One position: ||a^T g||^2 = ||a||^2 ||g||^2.
    per_group = (tf.reduce_sum(tf.square(a), [1, 2])
                 * tf.reduce_sum(tf.square(g), [1, 2]))
  elif use_ghost(a, g):
    aa = tf.matmul(a, a, transpose_b=True)
    gg = tf.matmul(g, g, transpose_b=True)
    per_group = tf.reduce_sum(aa * gg, axis=[1, 2])
  else:
    grads = tf.matmul(a, g, transpose_a=True)  # [R * G, K, C]
    per_group = tf.reduce_sum(tf.square(grads), axis=[1, 2])
  return tf.reduce_sum(tf.reshape(per_group, [records, -1]), 1)


def bias_grads(out_grad, bias_shape, records):
  """``[R, *bias_shape]``: per-record gradients of a broadcast bias."""
  g = tf.convert_to_tensor(out_grad)
  rank = g.shape.rank
  bias_shape = list(bias_shape)
  lead = rank - 1 - len(bias_shape)
  axes = list(range(1, 1 + lead)) + [
      1 + lead + i for i, d in enumerate(bias_shape) if d == 1]
  g = tf.reduce_sum(g, axis=axes, keepdims=True) if axes else g
  return tf.reduce_sum(tf.reshape(g, [records, -1] + bias_shape), 1)


class LinearRule:
  """Base rule for a kernel (and optional bias) with z = f(x, kernel) + b.

  Subclasses give ``kernel_rows(layer, x, g, records) -> (a, g)`` in the
  grouped-row layout above and ``kernel_sum(layer, x, g)``: the kernel
  gradient of the batch for output gradient g (already scaled per record).
  """

  pre_activation = True

  def supports(self, layer):
    return not (getattr(layer, "lora_enabled", False)
                or getattr(layer, "quantization_mode", None))

  def kernel(self, layer):
    return layer.kernel

  def variables(self, layer):
    out = [self.kernel(layer)]
    if getattr(layer, "use_bias", True) and getattr(layer, "bias",
                                                    None) is not None:
      out.append(layer.bias)
    return out

  def kernel_rows(self, layer, x, g, records):
    raise NotImplementedError

  def kernel_sum(self, layer, x, g):
    raise NotImplementedError

  def prepare(self, layer, tap, out_grad, records):
    x = tf.cast(tf.convert_to_tensor(tap.args[0]), out_grad.dtype)
    return {"layer": layer, "x": x, "g": out_grad, "records": records}

  def kernel_sq_norms(self, layer, x, g, records):
    """``[R]`` squared norms of each record's kernel gradient."""
    a, g = self.kernel_rows(layer, x, g, records)
    return kernel_sq_norms(a, g, records)

  def sq_norms(self, state):
    layer, records = state["layer"], state["records"]
    norms = [self.kernel_sq_norms(layer, state["x"], state["g"], records)]
    if len(self.variables(layer)) > 1:
      # Kept for clipped_sums: the bias's clipped sum is their weighted sum.
      state["bias_grads"] = bias_grads(state["g"], layer.bias.shape, records)
      norms.append(tf.reduce_sum(
          tf.square(tf.reshape(state["bias_grads"], [records, -1])), 1))
    return norms

  def clipped_sums(self, state, scales, keep):
    layer, records = state["layer"], state["records"]
    x = per_example(state["x"], records, keep)
    g = per_example(state["g"], records, keep)
    kernel = self.kernel(layer)
    total = self.kernel_sum(layer, x, per_example(g, records, scales[0]))
    out = [tf.reshape(total, tf.shape(kernel))]
    if len(scales) > 1:
      bias = mask(state["bias_grads"], keep)
      out.append(tf.tensordot(scales[1], bias, axes=[[0], [0]]))
    return out


def matmul_kernel_sum(x, g):
  """``sum over rows of x^T g`` for x [..., K], g [..., C] (rank-2 matmul)."""
  k, c = tf.shape(x)[-1], tf.shape(g)[-1]
  return tf.matmul(tf.reshape(x, [-1, k]), tf.reshape(g, [-1, c]),
                   transpose_a=True)
