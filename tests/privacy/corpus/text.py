"""Text models on integer token ids (no TextVectorization: the ids are the
input), as Keras's examples and TensorFlow's tutorials write them."""

import numpy as np

from tests.privacy.corpus import case as corpus

VOCAB, LENGTH = 64, 12


@corpus.case(corpus.tokens(LENGTH, VOCAB, num_classes=1, padded=True),
             loss=corpus.binary_logits,
             origin="tensorflow.org 'Word embeddings'")
def embedding_average(K):
  embedding_dim = 8
  return K.Sequential([
      K.Input(shape=(LENGTH,), dtype="int32"),
      K.layers.Embedding(VOCAB, embedding_dim, name="embedding"),
      K.layers.GlobalAveragePooling1D(),
      K.layers.Dense(16, activation="relu"),
      K.layers.Dense(1),
  ])


@corpus.case(corpus.tokens(16, VOCAB, num_classes=1),
             loss=corpus.named("binary_crossentropy"),
             origin="keras.io 'Text classification from scratch'")
def text_conv1d(K):
  layers = K.layers
  inputs = K.Input(shape=(None,), dtype="int64")
  x = layers.Embedding(VOCAB, 8)(inputs)
  x = layers.Dropout(0.5)(x)
  x = layers.Conv1D(16, 3, padding="valid", activation="relu", strides=2)(x)
  x = layers.Conv1D(16, 3, padding="valid", activation="relu", strides=2)(x)
  x = layers.GlobalMaxPooling1D()(x)
  x = layers.Dense(16, activation="relu")(x)
  x = layers.Dropout(0.5)(x)
  predictions = layers.Dense(1, activation="sigmoid", name="predictions")(x)
  return K.Model(inputs, predictions)


@corpus.case(corpus.tokens(LENGTH, VOCAB, num_classes=1, padded=True),
             loss=corpus.binary_logits,
             origin="tensorflow.org 'Text classification with an RNN' "
                    "(mask_zero, Bidirectional LSTM)", slow=True)
def masked_bidirectional_lstm(K):
  return K.Sequential([
      K.Input(shape=(None,), dtype="int32"),
      K.layers.Embedding(input_dim=VOCAB, output_dim=8, mask_zero=True),
      K.layers.Bidirectional(K.layers.LSTM(8)),
      K.layers.Dense(8, activation="relu"),
      K.layers.Dense(1),
  ])


@corpus.case(corpus.tokens(LENGTH, VOCAB, num_classes=1),
             loss=corpus.named("binary_crossentropy"),
             origin="keras.io 'Bidirectional LSTM on IMDB'", slow=True)
def stacked_bidirectional_lstm(K):
  inputs = K.Input(shape=(None,), dtype="int32")
  x = K.layers.Embedding(VOCAB, 8)(inputs)
  x = K.layers.Bidirectional(K.layers.LSTM(8, return_sequences=True))(x)
  x = K.layers.Bidirectional(K.layers.LSTM(8))(x)
  outputs = K.layers.Dense(1, activation="sigmoid")(x)
  return K.Model(inputs, outputs)


@corpus.case(corpus.tokens(LENGTH, VOCAB, num_classes=3, padded=True),
             origin="Embedding(mask_zero=True) + GRU", slow=True)
def masked_gru(K):
  return K.Sequential([
      K.Input(shape=(LENGTH,), dtype="int32"),
      K.layers.Embedding(VOCAB, 8, mask_zero=True),
      K.layers.GRU(8),
      K.layers.Dropout(0.2),
      K.layers.Dense(3),
  ])


@corpus.case(corpus.tokens(LENGTH, VOCAB, num_classes=4),
             loss=corpus.named("sparse_categorical_crossentropy"),
             origin="Embedding + SimpleRNN", slow=True)
def simple_rnn_classifier(K):
  return K.Sequential([
      K.Input(shape=(LENGTH,), dtype="int32"),
      K.layers.Embedding(VOCAB, 8),
      K.layers.SimpleRNN(8),
      K.layers.Dense(4, activation="softmax"),
  ])


def _characters(rng, n, maxlen=10, chars=12):
  """One-hot windows of characters and the next character (one-hot)."""
  ids = rng.integers(0, chars, size=(n, maxlen + 1))
  one_hot = np.eye(chars, dtype="float32")
  return one_hot[ids[:, :maxlen]], one_hot[ids[:, maxlen]]


@corpus.case(_characters, loss=corpus.named("categorical_crossentropy"),
             optimizer=lambda K: K.optimizers.RMSprop(learning_rate=0.01),
             origin="keras.io 'Character-level text generation with LSTM'",
             slow=True)
def char_lstm(K):
  maxlen, chars = 10, 12
  return K.Sequential([
      K.Input(shape=(maxlen, chars)),
      K.layers.LSTM(16),
      K.layers.Dense(chars, activation="softmax"),
  ])


def _tagged(rng, n):
  x = corpus.token_ids(rng, n, LENGTH, VOCAB, padded=True)
  tags = rng.integers(1, 5, size=(n, LENGTH)) * (x > 0)
  return x, tags.astype("int32")


@corpus.case(_tagged, origin="a BiLSTM sequence tagger: one label per token "
                             "(TimeDistributed Dense)", slow=True)
def bilstm_tagger(K):
  inputs = K.Input(shape=(LENGTH,), dtype="int32")
  x = K.layers.Embedding(VOCAB, 8, mask_zero=True)(inputs)
  x = K.layers.Bidirectional(K.layers.LSTM(8, return_sequences=True))(x)
  x = K.layers.Dropout(0.1)(x)
  outputs = K.layers.TimeDistributed(K.layers.Dense(5))(x)
  return K.Model(inputs, outputs)


def _positions(K, length):
  if corpus.is_keras3(K):
    return K.ops.arange(start=0, stop=length, step=1)
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf.range(start=0, limit=length, delta=1)


def transformer_block(K, embed_dim, num_heads, ff_dim, rate=0.1):
  """keras.io's ``TransformerBlock`` layer, for Keras module ``K``."""
  layers = K.layers

  class TransformerBlock(layers.Layer):

    def __init__(self, **kwargs):
      super().__init__(**kwargs)
      self.att = layers.MultiHeadAttention(num_heads=num_heads,
                                           key_dim=embed_dim)
      self.ffn = K.Sequential([layers.Dense(ff_dim, activation="relu"),
                               layers.Dense(embed_dim)])
      self.layernorm1 = layers.LayerNormalization(epsilon=1e-6)
      self.layernorm2 = layers.LayerNormalization(epsilon=1e-6)
      self.dropout1 = layers.Dropout(rate)
      self.dropout2 = layers.Dropout(rate)

    def call(self, inputs, training=None):
      attn_output = self.att(inputs, inputs)
      attn_output = self.dropout1(attn_output, training=training)
      out1 = self.layernorm1(inputs + attn_output)
      ffn_output = self.ffn(out1)
      ffn_output = self.dropout2(ffn_output, training=training)
      return self.layernorm2(out1 + ffn_output)

  return TransformerBlock()


def token_and_position_embedding(K, maxlen, vocab_size, embed_dim):
  """keras.io's ``TokenAndPositionEmbedding`` layer."""
  layers = K.layers

  class TokenAndPositionEmbedding(layers.Layer):

    def __init__(self, **kwargs):
      super().__init__(**kwargs)
      self.token_emb = layers.Embedding(input_dim=vocab_size,
                                        output_dim=embed_dim)
      self.pos_emb = layers.Embedding(input_dim=maxlen, output_dim=embed_dim)

    def call(self, x):
      positions = self.pos_emb(_positions(K, maxlen))
      return self.token_emb(x) + positions

  return TokenAndPositionEmbedding()


@corpus.case(corpus.tokens(LENGTH, VOCAB, num_classes=2),
             loss=corpus.named("sparse_categorical_crossentropy"),
             origin="keras.io 'Text classification with Transformer'")
def transformer_classifier(K):
  embed_dim, num_heads, ff_dim = 8, 2, 16
  layers = K.layers
  inputs = layers.Input(shape=(LENGTH,))
  x = token_and_position_embedding(K, LENGTH, VOCAB, embed_dim)(inputs)
  x = transformer_block(K, embed_dim, num_heads, ff_dim)(x)
  x = layers.GlobalAveragePooling1D()(x)
  x = layers.Dropout(0.1)(x)
  x = layers.Dense(8, activation="relu")(x)
  x = layers.Dropout(0.1)(x)
  outputs = layers.Dense(2, activation="softmax")(x)
  return K.Model(inputs=inputs, outputs=outputs)
