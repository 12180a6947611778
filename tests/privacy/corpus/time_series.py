"""Time-series models on ``[batch, time, features]``, as Keras's examples
and TensorFlow's tutorials write them."""

from tests.privacy.corpus import case as corpus

STEPS, FEATURES = 16, 3


@corpus.case(corpus.series(STEPS, 1, 2),
             loss=corpus.named("sparse_categorical_crossentropy"),
             origin="keras.io 'Timeseries classification from scratch' "
                    "(BatchNormalization swapped by "
                    "with_group_normalization)")
def fcn_classifier(K):
  import tf_dp  # pylint: disable=g-import-not-at-top
  layers = K.layers
  input_layer = K.layers.Input((STEPS, 1))
  x = input_layer
  for _ in range(3):
    x = layers.Conv1D(filters=8, kernel_size=3, padding="same")(x)
    x = layers.BatchNormalization()(x)
    x = layers.ReLU()(x)
  gap = layers.GlobalAveragePooling1D()(x)
  output_layer = layers.Dense(2, activation="softmax")(gap)
  model = K.Model(inputs=input_layer, outputs=output_layer)
  return tf_dp.keras.with_group_normalization(model)


@corpus.case(corpus.series(STEPS, FEATURES, "next"), loss=corpus.named("mse"),
             origin="keras.io 'Timeseries forecasting for weather "
                    "prediction'", slow=True)
def weather_lstm(K):
  inputs = K.layers.Input(shape=(STEPS, FEATURES))
  lstm_out = K.layers.LSTM(8)(inputs)
  outputs = K.layers.Dense(1)(lstm_out)
  return K.Model(inputs=inputs, outputs=outputs)


@corpus.case(corpus.series(STEPS, FEATURES, "each"),
             loss=lambda K: K.losses.MeanSquaredError(),
             origin="tensorflow.org 'Time series forecasting' (RNN on "
                    "every time step)", slow=True)
def gru_every_step(K):
  return K.Sequential([
      K.Input((STEPS, FEATURES)),
      K.layers.GRU(8, return_sequences=True),
      K.layers.Dense(units=1),
  ])


def _multi_step(rng, n, out_steps=4):
  x, _ = corpus.series(STEPS, FEATURES, "next")(rng, n)
  return x, 0.5 * x[:, -out_steps:, :]


@corpus.case(_multi_step, loss=lambda K: K.losses.MeanSquaredError(),
             origin="tensorflow.org 'Time series forecasting' (multi-step "
                    "CNN with a Lambda slice)")
def multi_step_conv(K):
  conv_width, out_steps = 3, 4
  return K.Sequential([
      K.Input((STEPS, FEATURES)),
      # Shape [batch, time, features] => [batch, CONV_WIDTH, features]
      K.layers.Lambda(lambda x: x[:, -conv_width:, :]),
      # Shape => [batch, 1, conv_units]
      K.layers.Conv1D(16, activation="relu", kernel_size=(conv_width)),
      # Shape => [batch, 1,  out_steps*features]
      K.layers.Dense(out_steps * FEATURES,
                     kernel_initializer=K.initializers.zeros()),
      # Shape => [batch, out_steps, features]
      K.layers.Reshape([out_steps, FEATURES]),
  ])


@corpus.case(corpus.series(STEPS, FEATURES, "next"), loss=corpus.named("mae"),
             origin="stacked LSTMs with Dropout between them", slow=True)
def stacked_lstm_dropout(K):
  return K.Sequential([
      K.Input((STEPS, FEATURES)),
      K.layers.LSTM(8, return_sequences=True),
      K.layers.Dropout(0.2),
      K.layers.LSTM(8),
      K.layers.Dropout(0.2),
      K.layers.Dense(1),
  ])


@corpus.case(corpus.series(STEPS, 1, 3),
             loss=corpus.named("sparse_categorical_crossentropy"),
             origin="keras.io 'Timeseries classification with a Transformer "
                    "model'")
def timeseries_transformer(K):
  layers = K.layers

  def transformer_encoder(inputs, head_size, num_heads, ff_dim, dropout=0):
    x = layers.MultiHeadAttention(key_dim=head_size, num_heads=num_heads,
                                  dropout=dropout)(inputs, inputs)
    x = layers.Dropout(dropout)(x)
    x = layers.LayerNormalization(epsilon=1e-6)(x)
    res = x + inputs
    x = layers.Conv1D(filters=ff_dim, kernel_size=1, activation="relu")(res)
    x = layers.Dropout(dropout)(x)
    x = layers.Conv1D(filters=inputs.shape[-1], kernel_size=1)(x)
    x = layers.LayerNormalization(epsilon=1e-6)(x)
    return x + res

  inputs = K.Input(shape=(STEPS, 1))
  x = inputs
  for _ in range(2):
    x = transformer_encoder(x, head_size=8, num_heads=2, ff_dim=4,
                            dropout=0.25)
  x = layers.GlobalAveragePooling1D(data_format="channels_last")(x)
  for dim in [16]:
    x = layers.Dense(dim, activation="relu")(x)
    x = layers.Dropout(0.4)(x)
  outputs = layers.Dense(3, activation="softmax")(x)
  return K.Model(inputs, outputs)


@corpus.case(corpus.series(STEPS, FEATURES, "next"), loss=corpus.named("mse"),
             origin="Conv1D + MaxPooling1D feature extractor before an LSTM",
             slow=True)
def conv_lstm_forecaster(K):
  return K.Sequential([
      K.Input((STEPS, FEATURES)),
      K.layers.Conv1D(8, 3, padding="causal", activation="relu"),
      K.layers.MaxPooling1D(2),
      K.layers.LSTM(8),
      K.layers.Dense(1),
  ])
