"""The DP-PCA + DP-SGD MNIST tutorial trains and accounts both releases."""

import os
import sys

import pytest

import tf_dp

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..",
                                "tutorials"))


@pytest.mark.slow
def test_dp_pca_mnist_short_run():
  import mnist_dp_pca  # pylint: disable=g-import-not-at-top
  accuracy, eps, ledger = mnist_dp_pca.run(epochs=1.0, verbose=0, seed=0)
  samples = ledger.to_dict()["samples"]
  assert samples[0]["sum_queries"] == [{"l2_norm_clip": 1.0,
                                        "noise_stddev": 4.0}]
  assert samples[0]["sampling_probability"] == pytest.approx(0.1)
  assert len(samples) == 1 + 100  # PCA + 1 epoch of lots with q = 0.01
  assert accuracy > 0.7  # chance 0.1
  # The ledger composes the PCA release with the training steps.
  only_training = dict(ledger.to_dict(), samples=samples[1:])
  eps_training, _ = tf_dp.analysis.compute_epsilon_from_ledger(
      only_training, 1e-5)
  assert eps > eps_training
