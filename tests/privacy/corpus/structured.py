"""Recommendation and tabular models: embedding towers, several inputs,
Concatenate, Normalization adapted on the training data, several
outputs."""

import numpy as np

from tests.privacy.corpus import case as corpus

USERS, ITEMS = 20, 30


def _ratings(rng, n):
  users = rng.integers(0, USERS, size=(n, 1)).astype("int32")
  items = rng.integers(0, ITEMS, size=(n, 1)).astype("int32")
  return (users, items), rng.uniform(0.5, 5.0, size=(n, 1)).astype("float32")


@corpus.case(_ratings, loss=corpus.named("mse"),
             origin="two Embedding towers joined by Dot (matrix "
                    "factorisation)")
def two_tower_dot(K):
  layers = K.layers
  user_input = K.Input(shape=(1,), name="user", dtype="int32")
  item_input = K.Input(shape=(1,), name="item", dtype="int32")
  user_vector = layers.Flatten()(layers.Embedding(USERS, 8)(user_input))
  item_vector = layers.Flatten()(layers.Embedding(ITEMS, 8)(item_input))
  user_vector = layers.Dense(8, activation="relu")(user_vector)
  item_vector = layers.Dense(8, activation="relu")(item_vector)
  rating = layers.Dot(axes=1)([user_vector, item_vector])
  return K.Model([user_input, item_input], rating)


def _movie_pairs(rng, n):
  x = np.stack([rng.integers(0, USERS, n), rng.integers(0, ITEMS, n)], 1)
  return x.astype("int64"), rng.uniform(size=(n, 1)).astype("float32")


def recommender_net_class(K, row_wise_dot):
  """keras.io's ``RecommenderNet``; ``row_wise_dot=False`` keeps the
  example's ``ops.tensordot(user_vector, movie_vector, 2)``."""
  layers = K.layers
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  ops = K.ops if corpus.is_keras3(K) else tf
  row_sum = K.ops.sum if corpus.is_keras3(K) else tf.reduce_sum

  class RecommenderNet(K.Model):

    def __init__(self, num_users, num_movies, embedding_size, **kwargs):
      super().__init__(**kwargs)
      self.user_embedding = layers.Embedding(
          num_users, embedding_size, embeddings_initializer="he_normal",
          embeddings_regularizer=K.regularizers.l2(1e-6))
      self.user_bias = layers.Embedding(num_users, 1)
      self.movie_embedding = layers.Embedding(
          num_movies, embedding_size, embeddings_initializer="he_normal",
          embeddings_regularizer=K.regularizers.l2(1e-6))
      self.movie_bias = layers.Embedding(num_movies, 1)

    def call(self, inputs):
      user_vector = self.user_embedding(inputs[:, 0])
      user_bias = self.user_bias(inputs[:, 0])
      movie_vector = self.movie_embedding(inputs[:, 1])
      movie_bias = self.movie_bias(inputs[:, 1])
      if row_wise_dot:
        dot_user_movie = row_sum(user_vector * movie_vector, axis=1,
                                 keepdims=True)
      else:
        dot_user_movie = ops.tensordot(user_vector, movie_vector, 2)
      x = dot_user_movie + user_bias + movie_bias
      return ops.sigmoid(x)

  return RecommenderNet


@corpus.case(_movie_pairs, loss=lambda K: K.losses.BinaryCrossentropy(),
             origin="keras.io 'Collaborative Filtering for Movie "
                    "Recommendations' (subclassed, L2-regularised "
                    "embeddings), as published",
             mixes_examples="tensordot(user_vector, movie_vector, 2) "
                            "contracts the batch axis too: every score "
                            "holds the sum of all the batch's dot products")
def recommender_net(K):
  return recommender_net_class(K, row_wise_dot=False)(USERS, ITEMS, 8)


@corpus.case(_movie_pairs, loss=lambda K: K.losses.BinaryCrossentropy(),
             origin="keras.io 'Collaborative Filtering for Movie "
                    "Recommendations', each example's own dot product")
def recommender_net_row_wise(K):
  return recommender_net_class(K, row_wise_dot=True)(USERS, ITEMS, 8)


@corpus.case(_ratings, loss=corpus.named("mse"),
             origin="neural collaborative filtering: a GMF branch "
                    "(Multiply) and an MLP branch (Concatenate)")
def neural_collaborative_filtering(K):
  layers = K.layers
  user = K.Input(shape=(1,), dtype="int32")
  item = K.Input(shape=(1,), dtype="int32")
  gmf = layers.Multiply()([
      layers.Flatten()(layers.Embedding(USERS, 4)(user)),
      layers.Flatten()(layers.Embedding(ITEMS, 4)(item))])
  mlp = layers.Concatenate()([
      layers.Flatten()(layers.Embedding(USERS, 4)(user)),
      layers.Flatten()(layers.Embedding(ITEMS, 4)(item))])
  mlp = layers.Dense(8, activation="relu")(mlp)
  mlp = layers.Dropout(0.2)(mlp)
  x = layers.Concatenate()([gmf, mlp])
  return K.Model([user, item], layers.Dense(1)(x))


def _auto_mpg(rng, n):
  x = rng.normal(loc=[5.0, 190.0, 100.0, 2900.0, 15.0, 76.0],
                 scale=[1.7, 100.0, 38.0, 850.0, 2.8, 3.7],
                 size=(n, 6)).astype("float32")
  y = (45.0 - 0.006 * x[:, 3] + rng.normal(size=n)).astype("float32")
  return x, y


def adapted_normalizer(K, features):
  """``Normalization`` adapted on a public sample of the features (the
  tutorial adapts it on the training set, a release this corpus does not
  account for)."""
  normalizer = K.layers.Normalization(axis=-1)
  normalizer.adapt(features)
  return normalizer


@corpus.case(_auto_mpg, loss=corpus.named("mean_absolute_error"),
             origin="tensorflow.org 'Basic regression: Predict fuel "
                    "efficiency' (Normalization.adapt)")
def auto_mpg_regression(K):
  normalizer = adapted_normalizer(K, _auto_mpg(np.random.default_rng(99),
                                               64)[0])
  return K.Sequential([
      K.Input((6,)),
      normalizer,
      K.layers.Dense(16, activation="relu"),
      K.layers.Dense(16, activation="relu"),
      K.layers.Dense(1),
  ])


def _heart(rng, n):
  features = {
      "age": rng.normal(55, 9, size=(n, 1)).astype("float32"),
      "chol": rng.normal(240, 50, size=(n, 1)).astype("float32"),
      "sex": rng.integers(0, 2, size=(n, 1)).astype("int64"),
      "cp": rng.integers(0, 5, size=(n, 1)).astype("int64"),
  }
  return features, corpus.labels(rng, n, 1)


@corpus.case(_heart, loss=corpus.named("binary_crossentropy"),
             origin="keras.io 'Structured data classification from "
                    "scratch' (dict of inputs, adapted Normalization, "
                    "CategoryEncoding, Concatenate)")
def structured_data_classifier(K):
  layers = K.layers
  public = _heart(np.random.default_rng(98), 64)[0]
  all_inputs, encoded = [], []
  for name in ("age", "chol"):
    feature_input = K.Input(shape=(1,), name=name)
    encoded.append(adapted_normalizer(K, public[name])(feature_input))
    all_inputs.append(feature_input)
  for name, depth in (("sex", 2), ("cp", 5)):
    feature_input = K.Input(shape=(1,), name=name, dtype="int64")
    encoded.append(layers.CategoryEncoding(num_tokens=depth,
                                           output_mode="one_hot")(
                                               feature_input))
    all_inputs.append(feature_input)
  x = layers.concatenate(encoded)
  x = layers.Dense(16, activation="relu")(x)
  x = layers.Dropout(0.5)(x)
  output = layers.Dense(1, activation="sigmoid")(x)
  return K.Model(all_inputs, output)


def _tickets(rng, n):
  title = corpus.token_ids(rng, n, 6, 50)
  body = corpus.token_ids(rng, n, 12, 50, padded=True)
  tags = rng.integers(0, 2, size=(n, 4)).astype("float32")
  priority = rng.uniform(size=(n, 1)).astype("float32")
  department = corpus.labels(rng, n, 3, one_hot=True)
  return ({"title": title, "body": body, "tags": tags},
          {"priority": priority, "department": department})


@corpus.case(_tickets, loss=lambda K: {
    "priority": K.losses.BinaryCrossentropy(from_logits=True),
    "department": K.losses.CategoricalCrossentropy(from_logits=True)},
             origin="keras.io functional API guide, 'Models with multiple "
                    "inputs and outputs' (support tickets)", slow=True)
def ticket_router(K):
  layers = K.layers
  title_input = K.Input(shape=(None,), name="title")
  body_input = K.Input(shape=(None,), name="body")
  tags_input = K.Input(shape=(4,), name="tags")
  title_features = layers.Embedding(50, 8)(title_input)
  body_features = layers.Embedding(50, 8)(body_input)
  title_features = layers.LSTM(8)(title_features)
  body_features = layers.LSTM(4)(body_features)
  x = layers.concatenate([title_features, body_features, tags_input])
  priority_pred = layers.Dense(1, name="priority")(x)
  department_pred = layers.Dense(3, name="department")(x)
  return K.Model(inputs=[title_input, body_input, tags_input],
                 outputs={"priority": priority_pred,
                          "department": department_pred})


def _wide_and_deep(rng, n):
  wide = rng.integers(0, 2, size=(n, 10)).astype("float32")
  category = rng.integers(0, 12, size=(n, 1)).astype("int32")
  dense = rng.normal(size=(n, 5)).astype("float32")
  return (wide, category, dense), corpus.labels(rng, n, 1)


@corpus.case(_wide_and_deep, loss=corpus.binary_logits,
             origin="wide & deep: a linear part on crossed features and a "
                    "deep part on an embedded category")
def wide_and_deep(K):
  layers = K.layers
  wide_input = K.Input((10,))
  category_input = K.Input((1,), dtype="int32")
  dense_input = K.Input((5,))
  embedded = layers.Flatten()(layers.Embedding(12, 4)(category_input))
  deep = layers.Concatenate()([embedded, dense_input])
  deep = layers.Dense(16, activation="relu")(deep)
  deep = layers.Dropout(0.1)(deep)
  deep = layers.Dense(8, activation="relu")(deep)
  both = layers.Concatenate()([wide_input, deep])
  return K.Model([wide_input, category_input, dense_input],
                 layers.Dense(1)(both))
