"""Subclassed models, custom layers written the ordinary way, and Keras 3
LoRA (``enable_lora``) on Dense, EinsumDense and Embedding."""

from tests.privacy.corpus import case as corpus

MNIST = (28, 28, 1)


@corpus.case(corpus.images(MNIST),
             origin="tensorflow.org 'TensorFlow 2 quickstart for experts' "
                    "(subclassed model)")
def quickstart_subclassed(K):
  layers = K.layers

  class MyModel(K.Model):

    def __init__(self):
      super().__init__()
      self.conv1 = layers.Conv2D(8, 3, activation="relu")
      self.flatten = layers.Flatten()
      self.d1 = layers.Dense(16, activation="relu")
      self.d2 = layers.Dense(10)

    def call(self, x):
      x = self.conv1(x)
      x = self.flatten(x)
      x = self.d1(x)
      return self.d2(x)

  return MyModel()


def _tabular(rng, n):
  x = rng.normal(size=(n, 12)).astype("float32")
  return x, (x[:, :1] - 0.5 * x[:, 1:2] + 0.1 * rng.normal(size=(n, 1))
             ).astype("float32")


def linear_layer(K):
  """keras.io subclassing guide's ``Linear`` layer (weights in build)."""

  class Linear(K.layers.Layer):

    def __init__(self, units=32):
      super().__init__()
      self.units = units

    def build(self, input_shape):
      self.w = self.add_weight(shape=(input_shape[-1], self.units),
                               initializer="random_normal", trainable=True)
      self.b = self.add_weight(shape=(self.units,), initializer="zeros",
                               trainable=True)

    def call(self, inputs):
      import tensorflow as tf  # pylint: disable=g-import-not-at-top
      ops = K.ops if corpus.is_keras3(K) else tf
      return ops.matmul(inputs, self.w) + self.b

  return Linear


@corpus.case(_tabular, loss=corpus.named("mse"),
             origin="keras.io 'Making new layers and models via "
                    "subclassing' (Linear layers in an MLPBlock)")
def subclassed_mlp_block(K):
  Linear = linear_layer(K)  # pylint: disable=invalid-name
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  relu = K.ops.relu if corpus.is_keras3(K) else tf.nn.relu

  class MLPBlock(K.Model):

    def __init__(self):
      super().__init__()
      self.linear_1 = Linear(16)
      self.linear_2 = Linear(16)
      self.linear_3 = Linear(1)

    def call(self, inputs):
      x = self.linear_1(inputs)
      x = relu(x)
      x = self.linear_2(x)
      x = relu(x)
      return self.linear_3(x)

  return MLPBlock()


@corpus.case(_tabular, loss=corpus.named("mse"), optimizer=corpus.sgd,
             origin="a custom layer with an elementwise weight (a learned "
                    "per-feature scale) in a functional model")
def custom_scale_layer(K):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  class FeatureScale(K.layers.Layer):

    def build(self, input_shape):
      self.scale = self.add_weight(name="scale", shape=(input_shape[-1],),
                                   initializer="ones")

    def call(self, inputs):
      return inputs * self.scale

  class RBF(K.layers.Layer):
    """Gaussian radial basis units with learned centres."""

    def __init__(self, units, **kwargs):
      super().__init__(**kwargs)
      self.units = units

    def build(self, input_shape):
      self.centres = self.add_weight(name="centres",
                                     shape=(self.units, input_shape[-1]),
                                     initializer="random_normal")

    def call(self, inputs):
      diff = tf.expand_dims(inputs, 1) - self.centres
      return tf.exp(-tf.reduce_sum(tf.square(diff), axis=-1))

  inputs = K.Input((12,))
  x = FeatureScale()(inputs)
  x = RBF(8)(x)
  x = K.layers.Dense(1)(x)
  return K.Model(inputs, x)


@corpus.case(_tabular, loss=corpus.named("mse"), flavours=(corpus.KERAS3,),
             origin="Keras 3 LoRA: a 'pretrained' MLP fine-tuned with "
                    "Dense.enable_lora(4)")
def dense_lora(K):
  model = K.Sequential([
      K.Input((12,)),
      K.layers.Dense(32, activation="relu"),
      K.layers.Dense(32, activation="relu"),
      K.layers.Dense(1),
  ])
  for layer in model.layers[:2]:
    layer.enable_lora(4)
  corpus.random_lora_factors(model)
  return model


@corpus.case(corpus.tokens(10, 40, num_classes=3), flavours=(corpus.KERAS3,),
             origin="Keras 3 LoRA on Embedding and EinsumDense")
def einsum_embedding_lora(K):
  layers = K.layers
  inputs = K.Input((10,), dtype="int32")
  embedding = layers.Embedding(40, 8)
  x = embedding(inputs)
  projection = layers.EinsumDense("btd,de->bte", output_shape=(None, 8),
                                  bias_axes="e", activation="relu")
  x = projection(x)
  x = layers.GlobalAveragePooling1D()(x)
  head = layers.Dense(3)
  model = K.Model(inputs, head(x))
  embedding.enable_lora(2)
  projection.enable_lora(2)
  corpus.random_lora_factors(model)
  return model
