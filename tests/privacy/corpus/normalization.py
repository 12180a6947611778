"""Convolutional nets with the normalisations DP training allows: tf_dp's
DPBatchNormalization, GroupNormalization, LayerNormalization, and
BatchNormalization frozen (a fine-tuning pattern)."""

from tests.privacy.corpus import case as corpus

CIFAR = (16, 16, 3)


def dp_batch_normalization(K):
  """tf_dp's DPBatchNormalization class of ``K``'s flavour."""
  if corpus.is_keras3(K):
    from tf_dp.keras import layers  # pylint: disable=g-import-not-at-top
    return layers.DPBatchNormalization
  from tf_dp.keras import layers_keras2  # pylint: disable=g-import-not-at-top
  return layers_keras2.DPBatchNormalization


@corpus.case(corpus.images(CIFAR), origin="Conv2D -> DPBatchNormalization "
                                          "-> ReLU, tf_dp's BN replacement")
def conv_dp_batch_norm(K):
  layers = K.layers
  batch_norm = dp_batch_normalization(K)
  return K.Sequential([
      K.Input(CIFAR),
      layers.Conv2D(8, 3, padding="same", use_bias=False),
      batch_norm(),
      layers.Activation("relu"),
      layers.MaxPooling2D(),
      layers.Conv2D(16, 3, padding="same", use_bias=False),
      batch_norm(),
      layers.Activation("relu"),
      layers.GlobalAveragePooling2D(),
      layers.Dense(10),
  ])


@corpus.case(corpus.images(CIFAR), origin="Conv2D -> GroupNormalization")
def conv_group_norm(K):
  layers = K.layers
  return K.Sequential([
      K.Input(CIFAR),
      layers.Conv2D(8, 3, padding="same"),
      layers.GroupNormalization(groups=4),
      layers.Activation("relu"),
      layers.MaxPooling2D(),
      layers.Conv2D(16, 3, padding="same"),
      layers.GroupNormalization(groups=8),
      layers.Activation("relu"),
      layers.Flatten(),
      layers.Dropout(0.3),
      layers.Dense(10),
  ])


@corpus.case(corpus.images(CIFAR), origin="Conv2D -> LayerNormalization")
def conv_layer_norm(K):
  layers = K.layers
  inputs = K.Input(CIFAR)
  x = layers.Conv2D(8, 3, activation="relu")(inputs)
  x = layers.LayerNormalization()(x)
  x = layers.Conv2D(16, 3, strides=2, activation="relu")(x)
  x = layers.LayerNormalization(axis=[1, 2, 3])(x)
  x = layers.GlobalAveragePooling2D()(x)
  return K.Model(inputs, layers.Dense(10)(x))


@corpus.case(corpus.images(CIFAR), origin="a pretrained-style conv body "
                                          "whose BatchNormalization layers "
                                          "are frozen, everything else "
                                          "trained")
def conv_frozen_batch_norm(K):
  layers = K.layers
  model = K.Sequential([
      K.Input(CIFAR),
      layers.Conv2D(8, 3, padding="same", use_bias=False),
      layers.BatchNormalization(),
      layers.ReLU(),
      layers.Conv2D(16, 3, strides=2, padding="same", use_bias=False),
      layers.BatchNormalization(),
      layers.ReLU(),
      layers.GlobalAveragePooling2D(),
      layers.Dropout(0.2),
      layers.Dense(10),
  ])
  for layer in model.layers:
    if isinstance(layer, layers.BatchNormalization):
      layer.trainable = False
  return model


@corpus.case(corpus.images(CIFAR, num_classes=1), loss=corpus.binary_logits,
             origin="tensorflow.org 'Transfer learning and fine-tuning': a "
                    "base unfrozen whole (BatchNormalization trainable) and "
                    "called with training=False, so it normalises with its "
                    "moving statistics",
             mixes_examples="Keras 3's functional model passes fit's "
                            "training=True to the base whatever its call "
                            "said: BatchNormalization normalises with the "
                            "batch's statistics",
             mixes_on=(corpus.KERAS3,))
def conv_base_called_in_inference_mode(K):
  layers = K.layers
  base_model = K.Sequential([
      K.Input(CIFAR),
      layers.Conv2D(8, 3, padding="same"),
      layers.BatchNormalization(),
      layers.ReLU(),
      layers.Conv2D(16, 3, strides=2, padding="same"),
      layers.BatchNormalization(),
      layers.ReLU(),
  ], name="base_model")
  base_model.trainable = True
  inputs = K.Input(shape=CIFAR)
  x = base_model(inputs, training=False)
  x = layers.GlobalAveragePooling2D()(x)
  x = layers.Dropout(0.2)(x)
  return K.Model(inputs, layers.Dense(1)(x))
