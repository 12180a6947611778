"""``keras.applications`` networks, random weights (``weights=None``) at
small inputs, their BatchNormalization swapped for GroupNormalization or
frozen. Each has a hundred layers or more: tracing the DP step takes tens of
seconds, so they are marked slow."""

from tests.privacy.corpus import case as corpus

SMALL = (32, 32, 3)  # The smallest input MobileNetV2 and EfficientNet take.


@corpus.case(corpus.images(SMALL), loss=corpus.named(
    "sparse_categorical_crossentropy"), slow=True,
             origin="keras.applications.MobileNetV2(alpha=0.35), "
                    "BatchNormalization swapped by with_group_normalization")
def mobilenet_v2_group_norm(K):
  import tf_dp  # pylint: disable=g-import-not-at-top
  model = K.applications.MobileNetV2(input_shape=SMALL, alpha=0.35,
                                     weights=None, classes=10)
  return tf_dp.keras.with_group_normalization(model)


@corpus.case(corpus.images(SMALL, num_classes=1, scale=255.0),
             loss=corpus.binary_logits, slow=True,
             origin="tensorflow.org 'Transfer learning and fine-tuning' "
                    "(MobileNetV2 unfrozen from layer 100 on, called with "
                    "training=False), its BatchNormalization layers frozen")
def mobilenet_v2_fine_tuning(K):
  layers = K.layers
  base_model = K.applications.MobileNetV2(input_shape=SMALL, alpha=0.35,
                                          include_top=False, weights=None)
  base_model.trainable = True
  fine_tune_at = 100
  for layer in base_model.layers[:fine_tune_at]:
    layer.trainable = False
  for layer in base_model.layers:
    if isinstance(layer, layers.BatchNormalization):
      layer.trainable = False
  inputs = K.Input(shape=SMALL)
  x = layers.RandomFlip("horizontal")(inputs)
  x = K.applications.mobilenet_v2.preprocess_input(x)
  x = base_model(x, training=False)
  x = layers.GlobalAveragePooling2D()(x)
  x = layers.Dropout(0.2)(x)
  outputs = layers.Dense(1)(x)
  return K.Model(inputs, outputs)


@corpus.case(corpus.images(SMALL, scale=255.0), loss=corpus.named(
    "sparse_categorical_crossentropy"), slow=True,
             origin="keras.applications.EfficientNetB0, BatchNormalization "
                    "swapped by with_group_normalization")
def efficientnet_b0_group_norm(K):
  import tf_dp  # pylint: disable=g-import-not-at-top
  model = K.applications.EfficientNetB0(input_shape=SMALL, weights=None,
                                        classes=10)
  return tf_dp.keras.with_group_normalization(model)


@corpus.case(corpus.images(SMALL, scale=255.0), slow=True,
             origin="keras.applications.ResNet50V2 body, frozen "
                    "BatchNormalization, a new head (fine-tuning)")
def resnet50_v2_frozen_batch_norm(K):
  layers = K.layers
  base_model = K.applications.ResNet50V2(input_shape=SMALL,
                                         include_top=False, weights=None)
  for layer in base_model.layers:
    if isinstance(layer, layers.BatchNormalization):
      layer.trainable = False
  inputs = K.Input(shape=SMALL)
  x = K.applications.resnet_v2.preprocess_input(inputs)
  x = base_model(x)
  x = layers.GlobalAveragePooling2D()(x)
  x = layers.Dropout(0.3)(x)
  return K.Model(inputs, layers.Dense(10)(x))
