"""The losses of the Keras registries, with labels and outputs each accepts.

Every loss a user can name in ``compile(loss=...)`` on each Keras flavour is
listed with the kind of labels and predictions it expects, so that the
privacy tests can run it on valid data, with and without a trailing 1 on
the labels.
"""

import numpy as np

# kind -> (number of output units, label shapes to try)
#   "regression":  real labels, positive predictions (also valid for msle,
#                  mape, poisson, log_cosh, huber, cosine similarity)
#   "binary":      labels in {0, 1}, one sigmoid unit
#   "categorical": one-hot labels over 3 classes, softmax outputs
#   "sparse":      integer labels over 3 classes, softmax outputs
#   "segmentation": labels in {0, 1} over 3 units, sigmoid outputs
KINDS = {
    "mse": "regression", "mae": "regression", "mape": "regression",
    "msle": "regression", "mean_squared_error": "regression",
    "mean_absolute_error": "regression",
    "mean_absolute_percentage_error": "regression",
    "mean_squared_logarithmic_error": "regression", "log_cosh": "regression",
    "huber": "regression", "poisson": "regression",
    "cosine_similarity": "regression",
    "binary_crossentropy": "binary", "bce": "binary",
    "binary_focal_crossentropy": "binary", "hinge": "binary",
    "squared_hinge": "binary",
    "categorical_crossentropy": "categorical",
    "categorical_focal_crossentropy": "categorical",
    "categorical_hinge": "categorical", "kld": "categorical",
    "kl_divergence": "categorical",
    "sparse_categorical_crossentropy": "sparse",
    "dice": "segmentation", "tversky": "segmentation",
}

# Loss classes by the kind of data they take.
CLASSES = {
    "MeanSquaredError": "regression", "MeanAbsoluteError": "regression",
    "MeanAbsolutePercentageError": "regression",
    "MeanSquaredLogarithmicError": "regression", "LogCosh": "regression",
    "Huber": "regression", "Poisson": "regression",
    "CosineSimilarity": "regression",
    "BinaryCrossentropy": "binary", "BinaryFocalCrossentropy": "binary",
    "Hinge": "binary", "SquaredHinge": "binary",
    "CategoricalCrossentropy": "categorical",
    "CategoricalFocalCrossentropy": "categorical",
    "CategoricalHinge": "categorical", "KLDivergence": "categorical",
    "SparseCategoricalCrossentropy": "sparse",
    "Dice": "segmentation", "Tversky": "segmentation",
}

# Losses defined over the whole batch (a ratio of sums over every example):
# a per-example loss is then each example's own ratio, which is private but
# does not average to the batch's value.
BATCH_LEVEL = {"dice", "tversky", "Dice", "Tversky"}

# Losses that compare examples with each other (metric learning) or need
# sequence-length inputs: they have no per-example form.
NOT_PER_EXAMPLE = {"circle", "Circle", "ctc", "CTC"}


def registry_names(K):
  """The loss names and classes this Keras flavour registers, with kinds."""
  names = [n for n in KINDS if _resolves(K, n)]
  classes = [c for c in CLASSES if hasattr(K.losses, c)]
  return names, classes


def _resolves(K, name):
  try:
    K.losses.get(name)
  except (ValueError, KeyError):
    return False
  return True


def configs(kind, batch):
  """``(output units, label shape)`` pairs to try for a kind of loss: with
  and without the trailing 1 on the labels where the output has one unit."""
  if kind in ("binary", "regression"):
    out = [(1, (batch,)), (1, (batch, 1))]
    return out + [(3, (batch, 3))] if kind == "regression" else out
  if kind == "sparse":
    return [(3, (batch,)), (3, (batch, 1))]
  return [(3, (batch, 3))]


def labels(kind, shape, rng):
  if kind == "regression":
    return rng.uniform(0.5, 2.0, size=shape).astype("float32")
  if kind in ("binary", "segmentation"):
    return rng.integers(0, 2, size=shape).astype("float32")
  if kind == "sparse":
    return rng.integers(0, 3, size=shape).astype("int32")
  return np.eye(shape[-1], dtype="float32")[rng.integers(0, shape[-1],
                                                        size=shape[0])]


def output_activation(kind):
  """Activation that puts predictions in the loss's domain."""
  return {"regression": "softplus", "binary": "sigmoid",
          "segmentation": "sigmoid"}.get(kind, "softmax")


def predictions(kind, units, batch, rng):
  logits = rng.normal(size=(batch, units)).astype("float32")
  if kind == "regression":
    return (np.log1p(np.exp(logits)) + 0.1).astype("float32")
  if kind in ("binary", "segmentation"):
    return (1 / (1 + np.exp(-logits))).astype("float32")
  e = np.exp(logits)
  return (e / e.sum(axis=1, keepdims=True)).astype("float32")
