"""Model validation and per-example randomness for ``make_private``.

* BatchNormalization mixes examples: one example's gradient depends on the
  others, so clipping no longer bounds a record's contribution. Refused.
* Activity regularisers and ``add_loss`` terms depend on the data and are
  not clipped per example. Refused.
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


def weight_regularization_loss(model, flavor):
  """Sum of the data-independent regularisation losses (or None)."""
  if flavor == "keras3":
    terms = [v.regularizer(v) for v in model.trainable_weights
             if getattr(v, "regularizer", None) is not None]
    terms += [l for layer in all_layers(model) for l in
              _keras3_layer_regularizers(layer)]
  else:
    terms = list(model.losses)
  terms = [tf.cast(t, tf.float32) for t in terms]
  return tf.add_n(terms) if terms else None


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

