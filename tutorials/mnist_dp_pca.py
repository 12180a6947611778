r"""MNIST with a DP-PCA projection and DP-SGD, in one privacy ledger.

Abadi et al. (2016), Sec. 4: project the inputs on 60 principal directions
computed with differential privacy, then train a network with DP-SGD on the
projections. Here the DP-PCA release (a Gaussian sum query on a Poisson
sample of the training images) and every DP-SGD step are recorded in the
same ``PrivacyLedger``, so the reported epsilon covers both.

Privacy claim: "adding or removing any one training image changes the
probability of any outcome (the projection and the trained model) by at
most a factor e^epsilon, except with probability delta".

  python tutorials/mnist_dp_pca.py --epochs=2
"""

import os

from absl import app
from absl import flags
import numpy as np

FLAGS = flags.FLAGS
flags.DEFINE_integer("components", 60, "Principal directions kept.")
flags.DEFINE_float("pca_sampling", 0.1, "Fraction of images used for PCA.")
flags.DEFINE_float("pca_noise", 4.0, "Noise stddev of the DP-PCA release.")
flags.DEFINE_float("epochs", 2, "DP-SGD epochs.")
flags.DEFINE_integer("batch_size", 600, "Expected lot size.")
flags.DEFINE_float("noise_multiplier", 2.0, "DP-SGD noise / clip.")
flags.DEFINE_float("l2_norm_clip", 4.0, "DP-SGD clip.")
flags.DEFINE_float("learning_rate", 0.1, "SGD learning rate.")
flags.DEFINE_float("delta", 1e-5, "Delta.")


def run(components=60, pca_sampling=0.1, pca_noise=4.0, epochs=2.0,
        batch_size=600, noise_multiplier=2.0, l2_norm_clip=4.0,
        learning_rate=0.1, delta=1e-5, verbose=2, seed=None):
  """Trains; returns ``(test_accuracy, epsilon, ledger)``."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tf_dp  # pylint: disable=g-import-not-at-top
  keras = tf.keras
  (x, y), (xt, yt) = tf_dp.data.load_mnist()
  x = (x.reshape(len(x), -1) / 255.0).astype("float32")
  xt = (xt.reshape(len(xt), -1) / 255.0).astype("float32")
  n = len(x)
  ledger = tf_dp.PrivacyLedger(n, pca_sampling, sampling="poisson",
                               max_samples=int(epochs * n / batch_size) + 10)
  rng = np.random.default_rng(seed)
  sample = x[rng.random(n) < pca_sampling]  # Poisson sample for PCA.
  directions, _ = tf_dp.reproductions.dp_principal_directions(
      sample, components, pca_noise, ledger=ledger,
      sampling_probability=pca_sampling)
  project = lambda a: a @ directions  # post-processing of a DP release.
  q = batch_size / n
  ledger.set_sample_size(sampling_probability=q)
  model = tf_dp.keras.make_private(keras.Sequential([
      keras.layers.Input((components,)),
      keras.layers.Dense(1000, activation="relu"), keras.layers.Dense(10)]))
  model.compile(optimizer=tf_dp.DPOptimizer(
      keras.optimizers.SGD(learning_rate), l2_norm_clip=l2_norm_clip,
      noise_multiplier=noise_multiplier, ledger=ledger,
      sampling_probability=q),
      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      weighted_metrics=["accuracy"])
  steps = int(round(epochs / q))
  data = tf_dp.data.poisson_sampled_batches(project(x), y.astype("int32"), q,
                                            steps, seed=seed)
  model.fit(data, steps_per_epoch=min(steps, int(round(1 / q))),
            epochs=max(1, int(np.ceil(steps * q))), verbose=verbose)
  _, accuracy = model.evaluate(project(xt), yt.astype("int32"), verbose=0)
  eps, _ = tf_dp.analysis.compute_epsilon_from_ledger(ledger, delta)
  return accuracy, eps, ledger


def main(argv):
  del argv
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  accuracy, eps, ledger = run(
      FLAGS.components, FLAGS.pca_sampling, FLAGS.pca_noise, FLAGS.epochs,
      FLAGS.batch_size, FLAGS.noise_multiplier, FLAGS.l2_norm_clip,
      FLAGS.learning_rate, FLAGS.delta)
  samples = ledger.to_dict()["samples"]
  print(f"ledger: 1 DP-PCA release + {len(samples) - 1} DP-SGD lots")
  print(f"test_accuracy={accuracy:.4f} epsilon={eps:.3f} "
        f"delta={FLAGS.delta:g}")


if __name__ == "__main__":
  app.run(main)
