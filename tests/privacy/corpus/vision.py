"""Image models as Keras's examples and TensorFlow's tutorials write them
(widths and image sizes shrunk for CI)."""

from tests.privacy.corpus import case as corpus

MNIST = (28, 28, 1)
CIFAR = (16, 16, 3)


@corpus.case(corpus.images(MNIST, one_hot=True),
             loss=corpus.named("categorical_crossentropy"),
             origin="keras.io 'Simple MNIST convnet'")
def mnist_convnet(K):
  layers = K.layers
  return K.Sequential([
      K.Input(shape=MNIST),
      layers.Conv2D(8, kernel_size=(3, 3), activation="relu"),
      layers.MaxPooling2D(pool_size=(2, 2)),
      layers.Conv2D(16, kernel_size=(3, 3), activation="relu"),
      layers.MaxPooling2D(pool_size=(2, 2)),
      layers.Flatten(),
      layers.Dropout(0.5),
      layers.Dense(10, activation="softmax"),
  ])


@corpus.case(corpus.images(MNIST), optimizer=corpus.sgd,
             origin="the strided CNN the privacy gate refused")
def strided_conv(K):
  return K.Sequential([
      K.Input((28, 28, 1)),
      K.layers.Conv2D(16, 3, strides=2, activation="relu"),
      K.layers.Flatten(),
      K.layers.Dense(10),
  ])


@corpus.case(corpus.images(MNIST[:2]),
             origin="tensorflow.org 'TensorFlow 2 quickstart for beginners'")
def quickstart_mlp(K):
  return K.Sequential([
      K.layers.Input((28, 28)),
      K.layers.Flatten(),
      K.layers.Dense(32, activation="relu"),
      K.layers.Dropout(0.2),
      K.layers.Dense(10),
  ])


@corpus.case(corpus.images(CIFAR), origin="tensorflow.org 'CNN' (CIFAR10)")
def cifar_cnn(K):
  model = K.Sequential()
  model.add(K.layers.Input(shape=CIFAR))
  model.add(K.layers.Conv2D(8, (3, 3), activation="relu"))
  model.add(K.layers.MaxPooling2D((2, 2)))
  model.add(K.layers.Conv2D(16, (3, 3), activation="relu"))
  model.add(K.layers.MaxPooling2D((2, 2)))
  model.add(K.layers.Conv2D(16, (2, 2), activation="relu"))
  model.add(K.layers.Flatten())
  model.add(K.layers.Dense(16, activation="relu"))
  model.add(K.layers.Dense(10))
  return model


@corpus.case(corpus.images(CIFAR, num_classes=5, scale=255.0),
             origin="tensorflow.org 'Image classification' (flowers, data "
                    "augmentation and dropout)")
def augmented_cnn(K):
  layers = K.layers
  data_augmentation = K.Sequential([
      layers.RandomFlip("horizontal"),
      layers.RandomRotation(0.1),
      layers.RandomZoom(0.1),
  ])
  return K.Sequential([
      K.Input(CIFAR),
      data_augmentation,
      layers.Rescaling(1. / 255),
      layers.Conv2D(8, 3, padding="same", activation="relu"),
      layers.MaxPooling2D(),
      layers.Conv2D(16, 3, padding="same", activation="relu"),
      layers.MaxPooling2D(),
      layers.Dropout(0.2),
      layers.Flatten(),
      layers.Dense(16, activation="relu"),
      layers.Dense(5, name="outputs"),
  ])


@corpus.case(corpus.images(CIFAR, num_classes=1, scale=255.0),
             loss=corpus.binary_logits,
             origin="keras.io 'Image classification from scratch' (a small "
                    "Xception, BatchNormalization swapped by "
                    "with_group_normalization)")
def mini_xception(K):
  import tf_dp  # pylint: disable=g-import-not-at-top
  layers = K.layers
  inputs = K.Input(shape=CIFAR)
  x = layers.RandomFlip("horizontal")(inputs)
  x = layers.Rescaling(1.0 / 255)(x)
  x = layers.Conv2D(16, 3, strides=2, padding="same")(x)
  x = layers.BatchNormalization()(x)
  x = layers.Activation("relu")(x)
  previous_block_activation = x
  for size in [16, 32]:
    x = layers.Activation("relu")(x)
    x = layers.SeparableConv2D(size, 3, padding="same")(x)
    x = layers.BatchNormalization()(x)
    x = layers.Activation("relu")(x)
    x = layers.SeparableConv2D(size, 3, padding="same")(x)
    x = layers.BatchNormalization()(x)
    x = layers.MaxPooling2D(3, strides=2, padding="same")(x)
    residual = layers.Conv2D(size, 1, strides=2, padding="same")(
        previous_block_activation)
    x = layers.add([x, residual])
    previous_block_activation = x
  x = layers.GlobalAveragePooling2D()(x)
  x = layers.Dropout(0.25)(x)
  outputs = layers.Dense(1, activation=None)(x)
  return tf_dp.keras.with_group_normalization(K.Model(inputs, outputs))


@corpus.case(corpus.images(CIFAR),
             origin="keras.io functional API guide, 'A toy ResNet model'")
def toy_resnet(K):
  layers = K.layers
  inputs = K.Input(shape=CIFAR, name="img")
  x = layers.Conv2D(8, 3, activation="relu")(inputs)
  x = layers.Conv2D(16, 3, activation="relu")(x)
  block_1_output = layers.MaxPooling2D(3)(x)
  x = layers.Conv2D(16, 3, activation="relu", padding="same")(block_1_output)
  x = layers.Conv2D(16, 3, activation="relu", padding="same")(x)
  block_2_output = layers.add([x, block_1_output])
  x = layers.Conv2D(16, 3, activation="relu", padding="same")(block_2_output)
  x = layers.Conv2D(16, 3, activation="relu", padding="same")(x)
  block_3_output = layers.add([x, block_2_output])
  x = layers.Conv2D(16, 3, activation="relu")(block_3_output)
  x = layers.GlobalAveragePooling2D()(x)
  x = layers.Dense(32, activation="relu")(x)
  x = layers.Dropout(0.5)(x)
  outputs = layers.Dense(10)(x)
  return K.Model(inputs, outputs, name="toy_resnet")


@corpus.case(corpus.images(CIFAR),
             origin="a MobileNet block: DepthwiseConv2D + 1x1 Conv2D")
def depthwise_separable(K):
  layers = K.layers
  inputs = K.Input(CIFAR)
  x = layers.Conv2D(8, 3, strides=2, padding="same", activation="relu")(
      inputs)
  for filters in (16, 16):
    x = layers.DepthwiseConv2D(3, padding="same", activation="relu")(x)
    x = layers.Conv2D(filters, 1, activation="relu")(x)
  x = layers.GlobalAveragePooling2D()(x)
  x = layers.Dropout(0.2)(x)
  return K.Model(inputs, layers.Dense(10)(x))


@corpus.case(corpus.images(CIFAR),
             origin="SeparableConv2D stack with global max pooling")
def separable_cnn(K):
  return K.Sequential([
      K.Input(CIFAR),
      K.layers.SeparableConv2D(8, 3, activation="relu", padding="same"),
      K.layers.MaxPooling2D(),
      K.layers.SeparableConv2D(16, 3, activation="relu", padding="same",
                               depth_multiplier=2),
      K.layers.GlobalMaxPooling2D(),
      K.layers.Dense(10),
  ])


def _denoising(rng, n):
  clean = rng.uniform(size=(n,) + MNIST).astype("float32")
  noisy = (clean + 0.4 * rng.normal(size=clean.shape)).clip(0, 1)
  return noisy.astype("float32"), clean


@corpus.case(_denoising, loss=corpus.named("binary_crossentropy"),
             origin="keras.io 'Convolutional autoencoder for image "
                    "denoising'")
def denoising_autoencoder(K):
  layers = K.layers
  inputs = layers.Input(shape=MNIST)
  x = layers.Conv2D(8, (3, 3), activation="relu", padding="same")(inputs)
  x = layers.MaxPooling2D((2, 2), padding="same")(x)
  x = layers.Conv2D(8, (3, 3), activation="relu", padding="same")(x)
  x = layers.MaxPooling2D((2, 2), padding="same")(x)
  x = layers.Conv2DTranspose(8, (3, 3), strides=2, activation="relu",
                             padding="same")(x)
  x = layers.Conv2DTranspose(8, (3, 3), strides=2, activation="relu",
                             padding="same")(x)
  x = layers.Conv2D(1, (3, 3), activation="sigmoid", padding="same")(x)
  return K.Model(inputs, x)


@corpus.case(corpus.images(MNIST, num_classes=1), loss=corpus.binary_logits,
             origin="keras.io 'DCGAN' discriminator")
def dcgan_discriminator(K):
  layers = K.layers
  return K.Sequential([
      K.Input(shape=MNIST),
      layers.Conv2D(8, kernel_size=4, strides=2, padding="same"),
      layers.LeakyReLU(0.2),
      layers.Conv2D(16, kernel_size=4, strides=2, padding="same"),
      layers.LeakyReLU(0.2),
      layers.Flatten(),
      layers.Dropout(0.2),
      layers.Dense(1),
  ], name="discriminator")


def _segmentation(rng, n):
  x = rng.uniform(size=(n, 16, 16, 3)).astype("float32")
  return x, rng.integers(0, 3, size=(n, 16, 16)).astype("int32")


@corpus.case(_segmentation, loss=corpus.named(
    "sparse_categorical_crossentropy"),
             origin="keras.io 'Image segmentation with a U-Net-like "
                    "architecture' (BatchNormalization swapped by "
                    "with_group_normalization)", slow=True)
def unet_segmentation(K):
  import tf_dp  # pylint: disable=g-import-not-at-top
  layers = K.layers
  inputs = K.Input(shape=(16, 16, 3))
  x = layers.Conv2D(8, 3, strides=2, padding="same")(inputs)
  x = layers.BatchNormalization()(x)
  x = layers.Activation("relu")(x)
  previous_block_activation = x
  x = layers.Activation("relu")(x)
  x = layers.SeparableConv2D(16, 3, padding="same")(x)
  x = layers.BatchNormalization()(x)
  x = layers.MaxPooling2D(3, strides=2, padding="same")(x)
  residual = layers.Conv2D(16, 1, strides=2, padding="same")(
      previous_block_activation)
  x = layers.add([x, residual])
  previous_block_activation = x
  for filters in [16, 8]:
    x = layers.Activation("relu")(x)
    x = layers.Conv2DTranspose(filters, 3, padding="same")(x)
    x = layers.BatchNormalization()(x)
    x = layers.UpSampling2D(2)(x)
    residual = layers.UpSampling2D(2)(previous_block_activation)
    residual = layers.Conv2D(filters, 1, padding="same")(residual)
    x = layers.add([x, residual])
    previous_block_activation = x
  outputs = layers.Conv2D(3, 3, activation="softmax", padding="same")(x)
  return tf_dp.keras.with_group_normalization(K.Model(inputs, outputs))
