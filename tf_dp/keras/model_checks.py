"""Model validation and per-example randomness for ``make_private``.

* BatchNormalization mixes examples: one example's gradient depends on the
  others, so clipping no longer bounds a record's contribution. Refused.
* Activity regularisers depend on the data and are not clipped per example.
  Refused. ``add_loss`` terms are evaluated on a public input (no data) and
  added outside the clipped sum; one that depends on the data is refused at
  the first step (``public_penalty``).
* Keras 3's Dropout, GaussianNoise and GaussianDropout draw from a stateless
  ``SeedGenerator``: under ``tf.vectorized_map`` every example would get the
  same mask. Their ``call`` is switched to stateful TF random ops, which
  draw independently per example. Other seeded layers are refused.
"""

import tensorflow as tf

from tf_dp.keras import compat

BATCH_NORM_ERROR = (
    "Layer {name!r} ({cls}) normalises with statistics of the whole batch: "
    "each example's gradient then depends on the other examples, the "
    "per-example clipping bound no longer holds, and the DP guarantee is "
    "void. Fixes: (1) replace it with keras.layers.GroupNormalization or "
    "keras.layers.LayerNormalization (per-example statistics), or (2) use "
    "tf_dp.keras.layers.DPBatchNormalization (tf_dp.keras.layers_keras2 for "
    "Keras 2), whose statistics are estimated with "
    "tf_dp.dp_query.BatchNormStatsQuery in the same ledger sample.")


MIXED_PRECISION_ERROR = (
    "Layer {name!r} computes in {compute} (dtype policy {policy!r}): "
    "float16 needs loss scaling, which Keras adds by wrapping the optimizer "
    "in a LossScaleOptimizer that would scale the clipped, noised gradient "
    "(not each example's gradient before clipping), so tf_dp refuses it. "
    "Use keras.mixed_precision.set_global_policy('mixed_bfloat16') (same "
    "speed-up on hardware with bfloat16 units, no loss scaling: tf_dp runs "
    "the forward and backward passes in bfloat16 and clips and noises in "
    "float32) or 'float32', and build the model under it.")


def all_layers(model):
  return list(model._flatten_layers(include_self=False, recursive=True))  # pylint: disable=protected-access


def _per_example_dropout(layer):
  def call(inputs, training=False):
    if not training or layer.rate == 0:
      return inputs
    shape = None
    if hasattr(layer, "_get_noise_shape"):
      shape = layer._get_noise_shape(inputs)  # pylint: disable=protected-access
    if shape is not None:
      shape = [tf.shape(inputs)[i] if d is None else d
               for i, d in enumerate(shape)]
    return tf.nn.dropout(inputs, rate=layer.rate, noise_shape=shape)
  return call


def _per_example_gaussian_noise(layer):
  def call(inputs, training=False):
    if not training or layer.stddev == 0:
      return inputs
    return inputs + tf.random.normal(tf.shape(inputs), stddev=layer.stddev,
                                     dtype=inputs.dtype)
  return call


def _per_example_gaussian_dropout(layer):
  def call(inputs, training=False):
    if not training or layer.rate == 0:
      return inputs
    stddev = (layer.rate / (1.0 - layer.rate)) ** 0.5
    return inputs * tf.random.normal(tf.shape(inputs), mean=1.0,
                                     stddev=stddev, dtype=inputs.dtype)
  return call


_RANDOM_LAYER_PATCHES = {
    "Dropout": _per_example_dropout,
    "SpatialDropout1D": _per_example_dropout,
    "SpatialDropout2D": _per_example_dropout,
    "SpatialDropout3D": _per_example_dropout,
    "GaussianNoise": _per_example_gaussian_noise,
    "GaussianDropout": _per_example_gaussian_dropout,
}


def batch_norm_classes(flavor):
  """Keras's batch-normalisation classes (and their bases) for ``flavor``.

  Checked with ``isinstance``: a subclass of BatchNormalization, whatever
  its name, still normalises with batch statistics.
  """
  layers = compat.module_for(flavor).layers
  roots = [layers.BatchNormalization]
  experimental = getattr(layers, "experimental", None)
  if getattr(experimental, "SyncBatchNormalization", None) is not None:
    roots.append(experimental.SyncBatchNormalization)
  classes = set()
  for root in roots:
    classes.update(c for c in root.__mro__
                   if "BatchNormalization" in c.__name__)
  return tuple(classes)


def validate_and_prepare(model, flavor):
  """Refuses layers that break per-example DP; fixes Keras 3 randomness."""
  batch_norms = batch_norm_classes(flavor)
  for layer in [model] + all_layers(model):
    compute = str(getattr(layer, "compute_dtype", None))
    if compute == "float16" and compute != str(
        getattr(layer, "variable_dtype", compute)):
      policy = getattr(layer, "dtype_policy", None)
      raise ValueError(MIXED_PRECISION_ERROR.format(
          name=layer.name, compute=compute,
          policy=getattr(policy, "name", policy)))
  for layer in all_layers(model):
    cls = type(layer).__name__
    if isinstance(layer, batch_norms):
      raise ValueError(BATCH_NORM_ERROR.format(name=layer.name, cls=cls))
    if getattr(layer, "activity_regularizer", None) is not None:
      raise ValueError(
          f"Layer {layer.name!r} has an activity_regularizer: it depends on "
          f"the data and would not be clipped per example. Remove it, or "
          f"use weight regularisers (kernel_regularizer), which are public.")
    if flavor != "keras3":
      continue
    patch = _RANDOM_LAYER_PATCHES.get(cls)
    if patch is not None and type(layer) is not getattr(  # pylint: disable=unidiomatic-typecheck
        compat.module_for(flavor).layers, cls, None):
      patch = None  # Same name, another class: not Keras's random layer.
    if patch is not None:
      layer.call = patch(layer)
    elif hasattr(layer, "recurrent_dropout") or hasattr(layer, "cell"):
      if (getattr(layer, "dropout", 0) or 0) > 0 or (
          getattr(layer, "recurrent_dropout", 0) or 0) > 0:
        raise ValueError(
            f"Layer {layer.name!r} ({cls}) uses dropout inside a Keras 3 RNN "
            f"cell, whose masks would be shared by all examples under "
            f"tf.vectorized_map. Set dropout=0 and recurrent_dropout=0, and "
            f"put a keras.layers.Dropout before or after the RNN instead.")
    elif getattr(layer, "seed_generator", None) is not None:
      raise ValueError(
          f"Layer {layer.name!r} ({cls}) draws randomness from a Keras 3 "
          f"SeedGenerator; inside tf.vectorized_map every example would get "
          f"the same draw. Replace it with a layer that uses tf.random ops.")


DATA_DEPENDENT_LOSS_ERROR = (
    "A layer of this model adds a loss with add_loss() that depends on the "
    "input data: tf_dp cannot clip it per example, so training with it "
    "would not be private. Compute that term inside the compiled loss (it "
    "is then clipped with the rest of each example's loss), or make it "
    "depend on the weights only.")


def _added_loss_terms(model):
  """The ``add_loss`` terms of the model's most recent call."""
  return [t for layer in [model] + all_layers(model)
          for t in getattr(layer, "_losses", [])]


def _float32_sum(terms):
  """The float32 sum of scalar loss terms, or None if there are none."""
  terms = [tf.cast(t, tf.float32) for t in terms]
  return tf.add_n(terms) if terms else None


def adds_losses(model, x):
  """Whether a call of ``model`` adds ``add_loss`` terms.

  Decided once per model by tracing (never running) a call on a batch of
  one, and cached.
  """
  cached = getattr(model, "_tf_dp_adds_losses", None)
  if cached is None:
    spec = tf.nest.map_structure(
        lambda t: tf.TensorSpec([1] + list(t.shape[1:]), t.dtype), x)
    tf.function(lambda t: model(t, training=True)).get_concrete_function(
        spec)
    cached = bool(_added_loss_terms(model))
    model._tf_dp_adds_losses = cached  # pylint: disable=protected-access
  return cached


def _public_batch_of_one(x, draw):
  def one(t):
    shape = tf.concat([[1], tf.shape(t)[1:]], 0)
    if t.dtype.is_floating:
      return tf.cast(draw(shape), t.dtype)
    return tf.cast(draw(shape) > 0, t.dtype)  # 0 and 1: valid ids, masks.
  return tf.nest.map_structure(one, x)


def public_penalty(model, x):
  """``model.losses`` (``add_loss`` terms and regularisers) evaluated on a
  public input, and its gradient.

  The input is a batch of one that holds no data (zeros); the same terms on
  a random public input must agree, otherwise the loss depends on the data
  and the step fails before any update with ``DATA_DEPENDENT_LOSS_ERROR``.
  Returns ``(penalty, gradients)``: nothing in them depends on the batch.
  """
  variables = model.trainable_variables
  with tf.GradientTape() as tape:
    model(_public_batch_of_one(x, tf.zeros), training=True)
    penalty = _float32_sum(model.losses)
  grads = tape.gradient(penalty, variables)
  model(_public_batch_of_one(x, tf.random.normal), training=True)
  other = _float32_sum(model.losses)
  same = tf.debugging.assert_near(penalty, other, rtol=1e-5, atol=1e-7,
                                  message=DATA_DEPENDENT_LOSS_ERROR)
  with tf.control_dependencies([same]):
    return tf.identity(penalty), [
        None if g is None else tf.identity(g) for g in grads]


def weight_regularization_loss(model, flavor):
  """Sum of the data-independent regularisation losses (or None)."""
  if flavor == "keras3":
    terms = [v.regularizer(v) for v in model.trainable_weights
             if getattr(v, "regularizer", None) is not None]
    terms += [l for layer in all_layers(model) for l in
              _keras3_layer_regularizers(layer)]
  else:
    terms = model.losses
  return _float32_sum(terms)


def _keras3_layer_regularizers(layer):
  out = []
  for attr, var_attr in (("kernel_regularizer", "kernel"),
                         ("bias_regularizer", "bias"),
                         ("embeddings_regularizer", "embeddings")):
    reg = getattr(layer, attr, None)
    var = getattr(layer, var_attr, None)
    if reg is not None and var is not None and getattr(
        var, "regularizer", None) is None:
      out.append(reg(var))
  return out

