"""Per-layer rules: per-record squared gradient norms and clipped sums.

A record r groups ``m`` examples (m = 1 without microbatches); a layer's
input and output-gradient rows are reshaped to ``[R, m * T, ...]`` where T
is the number of positions (sequence steps, image patches). For a kernel
used as ``z = a W`` the record's gradient is ``A_r^T G_r`` and

    ||A_r^T G_r||_F^2 = sum((A_r A_r^T) * (G_r G_r^T))          (ghost norm)

(Goodfellow 2015 for T = 1; Li, Tramer, Liang & Hashimoto 2021 for
sequences). Computing it costs ~ m T^2 (K + C) per record; materialising
``A_r^T G_r`` costs ~ m T K C. Each layer takes the cheaper of the two, per
layer and per input shape (Bu et al. 2023, "book-keeping").

A rule answers for one layer type:
  * ``supports(layer)``: can it handle this configuration?
  * ``pre_activation``: tap z before the activation (Dense, Conv).
  * ``prepare(layer, tap, out_grad, records)``: per-record tensors.
  * ``sq_norms(state)``: ``[R]`` squared norm per trainable variable.
  * ``clipped_sums(state, scales)``: ``sum_r scales_v[r] * grad_v[r]`` per
    variable (records to drop have scale 0 and are masked, so NaN or inf in
    a dropped record cannot leak into the sum).

``register_rule(layer_class, rule)`` adds rules for user layers.
"""

import tensorflow as tf

_RULES = {}


def register_rule(layer_class_or_name, rule):
  """Registers ``rule`` for layers of exactly this class (or class name)."""
  name = (layer_class_or_name if isinstance(layer_class_or_name, str)
          else layer_class_or_name.__name__)
  _RULES[name] = rule


def rule_for(layer):
  rule = _RULES.get(type(layer).__name__)
  if rule is not None and rule.supports(layer):
    return rule
  return None


def _per_record(t, records):
  """[B, ..., d] -> [R, (B / R) * prod(...), d]."""
  t = tf.convert_to_tensor(t)
  return tf.reshape(t, [records, -1, tf.shape(t)[-1]])


def _mask(t, keep):
  shape = tf.concat([tf.shape(keep), tf.ones([tf.rank(t) - 1], tf.int32)], 0)
  return tf.where(tf.reshape(keep, shape), t, tf.zeros_like(t))


def _kernel_sq_norm(a, g, use_ghost):
  if use_ghost:
    aa = tf.matmul(a, a, transpose_b=True)
    gg = tf.matmul(g, g, transpose_b=True)
    return tf.reduce_sum(aa * gg, axis=[1, 2])
  per_record = tf.matmul(a, g, transpose_a=True)  # [r, k, c]
  return tf.reduce_sum(tf.square(per_record), axis=[1, 2])


def _use_ghost(a, g):
  t, k, c = a.shape[1], a.shape[2], g.shape[2]
  if t is None or k is None or c is None:
    return True
  return t * t * (k + c) < t * k * c


class _LinearRule:
  """Kernel (and bias) of z = a W + b over positions: Dense and Conv."""

  pre_activation = True

  def inputs_as_rows(self, layer, x):
    raise NotImplementedError

  def prepare(self, layer, tap, out_grad, records):
    x = tf.convert_to_tensor(tap.args[0])
    a = _per_record(self.inputs_as_rows(layer, x), records)
    g = _per_record(out_grad, records)
    return {"layer": layer, "a": tf.cast(a, g.dtype), "g": g,
            "ghost": _use_ghost(a, g)}

  def variables(self, layer):
    out = [layer.kernel]
    if getattr(layer, "use_bias", False) and layer.bias is not None:
      out.append(layer.bias)
    return out

  def sq_norms(self, state):
    norms = [_kernel_sq_norm(state["a"], state["g"], state["ghost"])]
    if len(self.variables(state["layer"])) > 1:
      norms.append(tf.reduce_sum(tf.square(tf.reduce_sum(state["g"], 1)), 1))
    return norms

  def clipped_sums(self, state, scales, keep):
    layer = state["layer"]
    a, g = _mask(state["a"], keep), _mask(state["g"], keep)
    # Scale the output gradients first, then one (r t)-contraction matmul:
    # a three-operand einsum would materialise an [r, t, k, c] tensor.
    g_scaled = g * scales[0][:, None, None]
    k, c = tf.shape(a)[-1], tf.shape(g)[-1]
    kernel = tf.matmul(tf.reshape(a, [-1, k]), tf.reshape(g_scaled, [-1, c]),
                       transpose_a=True)
    out = [tf.reshape(kernel, tf.shape(layer.kernel))]
    if len(scales) > 1:
      out.append(tf.reduce_sum(g * scales[1][:, None, None], axis=[0, 1]))
    return out


class DenseRule(_LinearRule):
  """keras.layers.Dense (any input rank: leading axes are positions)."""

  def supports(self, layer):
    return not (getattr(layer, "lora_enabled", False)
                or getattr(layer, "quantization_mode", None))

  def inputs_as_rows(self, layer, x):
    return x


class ConvRule(_LinearRule):
  """keras.layers.Conv1D / Conv2D via image patches (channels_last only)."""

  def supports(self, layer):
    return (getattr(layer, "data_format", "channels_last") == "channels_last"
            and getattr(layer, "groups", 1) == 1
            and str(layer.padding).lower() in ("valid", "same")
            and not getattr(layer, "lora_enabled", False))

  def inputs_as_rows(self, layer, x):
    rank = len(layer.kernel_size)
    ks, st, dl = (list(layer.kernel_size), list(layer.strides),
                  list(layer.dilation_rate))
    if rank == 1:
      x = x[:, None]
      ks, st, dl = [1] + ks, [1] + st, [1] + dl
    return tf.image.extract_patches(
        x, sizes=[1] + ks + [1], strides=[1] + st + [1],
        rates=[1] + dl + [1], padding=str(layer.padding).upper())


class EmbeddingRule:
  """keras.layers.Embedding: ghost norm over positions with equal tokens."""

  pre_activation = False

  def supports(self, layer):
    return not (getattr(layer, "lora_enabled", False)
                or getattr(layer, "quantization_mode", None))

  def variables(self, layer):
    return [layer.embeddings]

  def prepare(self, layer, tap, out_grad, records):
    ids = tf.reshape(tf.cast(tap.args[0], tf.int32), [records, -1])
    g = _per_record(out_grad, records)
    return {"layer": layer, "ids": ids, "g": g}

  def sq_norms(self, state):
    ids, g = state["ids"], state["g"]
    same = tf.cast(tf.equal(ids[:, :, None], ids[:, None, :]), g.dtype)
    return [tf.reduce_sum(same * tf.matmul(g, g, transpose_b=True), [1, 2])]

  def clipped_sums(self, state, scales, keep):
    g = _mask(state["g"], keep) * scales[0][:, None, None]
    table = state["layer"].embeddings
    rows = tf.math.unsorted_segment_sum(
        tf.reshape(g, [-1, tf.shape(g)[-1]]), tf.reshape(state["ids"], [-1]),
        tf.shape(table)[0])
    return [rows]


class LayerNormalizationRule:
  """keras.layers.LayerNormalization over the last axis (materialised)."""

  pre_activation = False

  def supports(self, layer):
    axis = layer.axis if isinstance(layer.axis, int) else (
        layer.axis[0] if len(layer.axis) == 1 else None)
    return (axis == -1 and not getattr(layer, "rms_scaling", False)
            and (layer.scale or layer.center))

  def variables(self, layer):
    out = []
    if layer.scale:
      out.append(layer.gamma)
    if layer.center:
      out.append(layer.beta)
    return out

  def prepare(self, layer, tap, out_grad, records):
    x = tf.cast(tap.args[0], out_grad.dtype)
    mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
    x_hat = (x - mean) * tf.math.rsqrt(var + layer.epsilon)
    g = _per_record(out_grad, records)
    per_record = []
    if layer.scale:
      per_record.append(tf.reduce_sum(g * _per_record(x_hat, records), 1))
    if layer.center:
      per_record.append(tf.reduce_sum(g, 1))
    return {"per_record": per_record}

  def sq_norms(self, state):
    return [tf.reduce_sum(tf.square(p), 1) for p in state["per_record"]]

  def clipped_sums(self, state, scales, keep):
    return [tf.reduce_sum(_mask(p, keep) * s[:, None], 0)
            for p, s in zip(state["per_record"], scales)]


class LocalVectorizedRule:
  """Any other layer: per-record VJP of this layer alone, vectorised.

  The layer is re-run on each record's inputs inside ``tf.vectorized_map``
  and differentiated with that record's output gradient: exactly the
  per-record gradient, at the cost of this layer only.
  """

  pre_activation = False

  def __init__(self, original_call):
    # Keras runs layer calls without autograph; so must we (autograph
    # breaks e.g. the while loops of RNN layers under vectorized_map).
    self._call = tf.autograph.experimental.do_not_convert(original_call)

  def variables(self, layer):
    return list(layer.trainable_variables)

  def prepare(self, layer, tap, out_grad, records):
    variables = self.variables(layer)
    split = lambda t: tf.reshape(t, tf.concat(
        [[records, -1], tf.shape(t)[1:]], 0)) if tf.is_tensor(t) else t
    args = tf.nest.map_structure(split, tap.args)
    grads_out = tf.nest.map_structure(split, out_grad)
    kwargs = tap.kwargs

    def one(inputs):
      rec_args, rec_grad = inputs
      with tf.GradientTape() as tape:
        out = self._call(*rec_args, **kwargs)
      grads = tape.gradient(out, variables, output_gradients=rec_grad)
      return [tf.zeros(v.shape, tf.as_dtype(v.dtype)) if gr is None
              else tf.convert_to_tensor(gr) for gr, v in zip(grads, variables)]

    per_record = tf.vectorized_map(one, (args, grads_out),
                                   fallback_to_while_loop=True)
    return {"per_record": per_record}

  def sq_norms(self, state):
    return [tf.reduce_sum(tf.square(tf.reshape(p, [tf.shape(p)[0], -1])), 1)
            for p in state["per_record"]]

  def clipped_sums(self, state, scales, keep):
    return [tf.tensordot(s, _mask(p, keep), axes=[[0], [0]])
            for p, s in zip(state["per_record"], scales)]


for _name in ("Dense",):
  register_rule(_name, DenseRule())
for _name in ("Conv1D", "Conv2D"):
  register_rule(_name, ConvRule())
register_rule("Embedding", EmbeddingRule())
register_rule("LayerNormalization", LayerNormalizationRule())
