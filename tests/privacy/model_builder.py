"""Keras models and neighbouring batches from ``tests/privacy/model_grammar``
specs, on Keras 3 or Keras 2.

``build_model(K, spec)`` makes the model a ``ModelSpec`` describes
(functional or a ``K.Model`` subclass), built, with weights that depend on
``spec.seed`` only. ``neighbouring_batches(spec, data)`` gives ``(D, D')``,
each ``(x, y, sample_weight)``, identical but for one record.
"""

import functools

import numpy as np
import tensorflow as tf

from tests.privacy import model_grammar as grammar


@functools.lru_cache(maxsize=None)
def custom_layers(K):
  """The grammar's custom layers, as subclasses of ``K.layers.Layer``."""

  class RowLayout(K.layers.Layer):
    """A Dense on the rows of another layout of a ``[B, T, F]`` tensor:
    ``rows_merge`` (``[B*T, F]``, example-major), ``time_major``
    (``[T, B, F]``) or ``time_major_merge`` (``[T*B, F]``), then back to
    ``[B, T, units]``. Separable: every row is one example's time step."""

    def __init__(self, units, layout, **kwargs):
      super().__init__(**kwargs)
      self.units, self.layout = units, layout
      self.dense = K.layers.Dense(units)

    def call(self, x):
      steps = x.shape[1] if x.shape[1] is not None else tf.shape(x)[1]
      features = x.shape[-1]
      if self.layout == "rows_merge":
        h = self.dense(tf.reshape(x, [-1, features]))
        return tf.reshape(h, [-1, steps, self.units])
      h = tf.transpose(x, [1, 0, 2])
      if self.layout == "time_major":
        return tf.transpose(self.dense(h), [1, 0, 2])
      h = self.dense(tf.reshape(h, [-1, features]))
      return tf.transpose(tf.reshape(h, [steps, -1, self.units]), [1, 0, 2])

    def compute_output_shape(self, input_shape):
      return tuple(input_shape[:-1]) + (self.units,)

  class BatchCenter(K.layers.Layer):
    """x minus its mean over the batch axis: mixes examples."""

    def call(self, x):
      return x - tf.reduce_mean(x, axis=0, keepdims=True)

  class RunningMean(K.layers.Layer):
    """Subtracts a non-trainable running mean that each training call
    assigns from the batch: read after the write (the output mixes
    examples) or before it (the variable keeps a data-dependent value)."""

    def __init__(self, write_first, **kwargs):
      super().__init__(**kwargs)
      self.write_first = write_first

    def build(self, input_shape):
      self.mean = self.add_weight(name="running_mean",
                                  shape=(input_shape[-1],),
                                  initializer="zeros", trainable=False)
      super().build(input_shape)

    def call(self, x, training=None):
      if not training:
        return x - tf.convert_to_tensor(self.mean)
      batch_mean = tf.reduce_mean(x, axis=list(range(len(x.shape) - 1)))
      if self.write_first:
        self.mean.assign(batch_mean)
        return x - tf.convert_to_tensor(self.mean)
      out = x - tf.convert_to_tensor(self.mean)
      self.mean.assign(0.9 * tf.convert_to_tensor(self.mean)
                       + 0.1 * batch_mean)
      return out

  @tf.custom_gradient
  def mixed_backward(x):
    def grad(dy):
      return dy + tf.reduce_mean(dy, axis=0, keepdims=True)
    return tf.identity(x), grad

  class MixGradient(K.layers.Layer):
    """The identity, whose gradient adds the batch's mean gradient."""

    def call(self, x):
      return mixed_backward(x)

  return dict(RowLayout=RowLayout, BatchCenter=BatchCenter,
              RunningMean=RunningMean, MixGradient=MixGradient)


def _pooling(K, rank, kind):
  return getattr(K.layers, f"{kind.capitalize()}Pooling{rank}D")


def _global_pooling(K, rank, kind):
  return getattr(K.layers, f"Global{kind.capitalize()}Pooling{rank}D")


def _chain(*layers):
  """Applies ``layers`` in turn; Dropout and RunningMean get ``training``."""
  def apply(h, training):
    for layer in layers:
      if type(layer).__name__ in ("Dropout", "RunningMean"):
        h = layer(h, training=training)
      else:
        h = layer(h)
    return h
  return apply


def _block_layers(K, block, shape):
  """``(layers, apply)`` for ``block`` on a tensor of ``shape``, where
  ``apply(h, training)`` calls the layers."""
  kind, width, option = block.kind, block.width, block.option
  custom = custom_layers(K)
  rank = len(shape)
  if kind == "dense":
    layers = [K.layers.Dense(width, activation=option)]
  elif kind == "conv1d":
    layers = [K.layers.Conv1D(width, 2, padding=option)]
  elif kind == "conv2d":
    layers = [K.layers.Conv2D(width, 2, padding="same", activation=option)]
  elif kind == "layernorm":
    layers = [K.layers.LayerNormalization()]
  elif kind == "groupnorm":
    layers = [K.layers.GroupNormalization(groups=width)]
  elif kind == "pool":
    layers = [_pooling(K, rank - 1, option)(2)]
  elif kind == "global_pool":
    layers = [_global_pooling(K, rank - 1, option)()]
  elif kind == "flatten":
    layers = [K.layers.Flatten()]
  elif kind in ("reshape", "permute"):
    target = grammar.output_shape(block, shape)
    layers = [K.layers.Reshape(target) if kind == "reshape" else
              K.layers.Permute((2, 1) if rank == 2 else (2, 1, 3))]
  elif kind == "rnn":
    layers = [K.layers.SimpleRNN(width,
                                 return_sequences=option == "sequences")]
  elif kind == "dropout":
    layers = [K.layers.Dropout(float(option))]
  elif kind in ("rows_merge", "time_major", "time_major_merge"):
    layers = [custom["RowLayout"](width, kind)]
  elif kind == "masked":
    consumer = (K.layers.SimpleRNN(width) if option == "rnn"
                else K.layers.GlobalAveragePooling1D())
    layers = [K.layers.Masking(0.0), K.layers.Dense(width), consumer]
  elif kind == "embedding":
    layers = [K.layers.Embedding(grammar.VOCABULARY, width,
                                 mask_zero=option != "plain")]
    if option == "mask_rnn":
      layers.append(K.layers.SimpleRNN(width))
    elif option == "mask_average":
      layers.append(K.layers.GlobalAveragePooling1D())
  elif kind == "shared_dense":
    dense = K.layers.Dense(shape[-1], activation=option)
    return [dense], lambda h, training: dense(dense(h))
  elif kind in ("residual", "concat"):
    dense = K.layers.Dense(shape[-1] if kind == "residual" else width,
                           activation=option)
    merge = K.layers.Add() if kind == "residual" else K.layers.Concatenate()
    return [dense, merge], lambda h, training: merge([h, dense(h)])
  elif kind == "batch_center":
    layers = [custom["BatchCenter"]()]
  elif kind == "running_mean":
    layers = [custom["RunningMean"](option == "write_then_read")]
  elif kind == "mix_gradient":
    layers = [custom["MixGradient"]()]
  elif kind == "batch_norm":
    layers = [K.layers.BatchNormalization()]
  else:
    raise ValueError(f"unknown block kind {kind!r}")
  return layers, _chain(*layers)


def _head(K, spec, shape):
  layers = []
  if len(shape) > 1:
    layers.append(K.layers.Flatten() if grammar.is_static(shape)
                  else _global_pooling(K, len(shape) - 1, "average")())
  layers.append(K.layers.Dense(grammar.LOSSES[spec.loss][0]))
  return layers, _chain(*layers)


def _program(K, spec):
  """Every block's ``(layers, apply)`` and the head's, in order."""
  shape = spec.input_shape
  program = []
  for block in spec.blocks:
    program.append(_block_layers(K, block, shape))
    shape = grammar.output_shape(block, shape)
  program.append(_head(K, spec, shape))
  return program


def _input_dtype(spec):
  return "int32" if spec.input_kind == "tokens" else "float32"


def _subclassed(K, program):

  class FuzzModel(K.Model):

    def __init__(self):
      super().__init__()
      self.parts = [layer for layers, _ in program for layer in layers]

    def call(self, x, training=None):
      for _, apply in program:
        x = apply(x, training)
      return x

  return FuzzModel()


def _enable_lora(K, spec, program):
  """Keras 3 LoRA on the first layer (Dense or Embedding) of each block
  with a LoRA rank, after the model is built; ``lora_kernel_b`` drawn
  (Keras's zeros would give ``lora_kernel_a`` a zero gradient)."""
  for (layers, _), block in zip(program, spec.blocks):
    if block.lora:
      layers[0].enable_lora(block.lora,
                            b_initializer=K.initializers.RandomNormal(
                                stddev=0.1, seed=spec.seed % 1000))


def build_model(K, spec):
  """The built Keras model ``spec`` describes; its initial weights depend on
  ``spec.seed`` only (``K.utils.set_random_seed``)."""
  K.utils.set_random_seed(spec.seed)
  program = _program(K, spec)
  if spec.style == "functional":
    inputs = K.Input(spec.input_shape, dtype=_input_dtype(spec))
    h = inputs
    for _, apply in program:
      h = apply(h, None)
    model = K.Model(inputs, h)
  else:
    model = _subclassed(K, program)
    model(_zeros_batch(spec, 1), training=False)
  _enable_lora(K, spec, program)
  return model


def _zeros_batch(spec, batch):
  shape = (batch,) + tuple(grammar.ANY_LENGTH_STEPS if d is None else d
                           for d in spec.input_shape)
  return tf.zeros(shape, _input_dtype(spec))


# Scale of each data mode's floating-point entries (and real labels).
_SCALES = {"normal": 1.0, "huge": 1e6, "tiny": 1e-6, "cancel": 1.0,
           "equal": 1.0, "zeros": 0.0, "sparse": 1.0, "constant": 1.0,
           "huge_constant": 1e6}


def _float_rows(rng, mode, shape):
  """``shape[0]`` rows filled by ``mode``: ``cancel`` alternates a row's
  sign from row to row and along its first axis (rows, and positions of a
  row, that cancel); ``equal`` repeats one row; ``constant`` and
  ``huge_constant`` repeat one position along a row's first axis (every
  time step alike: a rule mixing rows then adds terms that all point the
  same way); ``sparse`` zeroes whole positions (masked by a Masking layer)
  with probability 0.6."""
  rows = rng.normal(size=shape) * _SCALES[mode]
  if mode in ("constant", "huge_constant") and len(shape) > 2:
    rows = np.repeat(rows[:, :1], shape[1], axis=1)
  if mode == "cancel":
    base = rows[:1]
    if len(shape) > 2:
      base = base * (-1.0) ** np.arange(shape[1]).reshape(
          (1, -1) + (1,) * (len(shape) - 2))
    rows = base * (-1.0) ** np.arange(shape[0]).reshape(
        (-1,) + (1,) * (len(shape) - 1))
  elif mode == "equal":
    rows = np.repeat(rows[:1], shape[0], axis=0)
  elif mode == "sparse":
    keep = rng.random(shape[:2]) > 0.6
    rows = rows * keep.reshape(shape[:2] + (1,) * (len(shape) - 2))
  return rows.astype("float32")


def _token_rows(rng, mode, shape):
  """Token ids: ``zeros`` is all padding (fully masked under mask_zero),
  ``sparse`` mostly padding, ``huge`` the largest id everywhere."""
  if mode == "zeros":
    return np.zeros(shape, "int32")
  if mode == "huge":
    return np.full(shape, grammar.VOCABULARY - 1, "int32")
  if mode == "tiny":
    return np.ones(shape, "int32")
  rows = rng.integers(0, grammar.VOCABULARY, size=shape)
  if mode == "cancel":
    rows = 1 + np.arange(shape[1])[None, :] % 2 + 0 * rows
  elif mode == "equal":
    rows = np.repeat(rows[:1], shape[0], axis=0)
  elif mode == "sparse":
    rows = rows * (rng.random(shape) > 0.7)
  return rows.astype("int32")


def _labels(rng, spec, mode, rows):
  units, kind = grammar.LOSSES[spec.loss]
  if kind == "class":
    return rng.integers(0, units, size=rows).astype("int32")
  if kind == "binary":
    return rng.integers(0, 2, size=(rows, 1)).astype("float32")
  if kind == "count":
    return rng.uniform(0, 20, size=(rows, units)).astype("float32")
  return (rng.normal(size=(rows, units)) * 3 * max(_SCALES[mode], 1.0)
          ).astype("float32")


def _batch(rng, spec, mode, rows):
  shape = (rows,) + tuple(grammar.ANY_LENGTH_STEPS if d is None else d
                          for d in spec.input_shape)
  x = (_token_rows if spec.input_kind == "tokens" else _float_rows)(
      rng, mode, shape)
  return x, _labels(rng, spec, mode, rows)


def neighbouring_batches(spec, data):
  """``(D, D')``, each ``(x, y, sample_weight)``: D' is D with the rows of
  record ``data.replaced`` (one example, or one user's rows) drawn anew by
  ``data.replacement_mode``, with weight ``data.replacement_weight``
  (when D has sample weights)."""
  rng = np.random.default_rng(data.seed)
  x, y = _batch(rng, spec, data.mode, data.batch)
  x_new, y_new = _batch(rng, spec, data.replacement_mode,
                        data.rows_per_user)
  rows = slice(data.replaced * data.rows_per_user,
               (data.replaced + 1) * data.rows_per_user)
  x2, y2 = x.copy(), y.copy()
  x2[rows], y2[rows] = x_new, y_new
  w = w2 = None
  if data.weights is not None:
    w = np.asarray(data.weights, "float32")
    w2 = w.copy()
    w2[rows] = data.replacement_weight
  return (x, y, w), (x2, y2, w2)
