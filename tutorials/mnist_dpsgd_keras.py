r"""Train the MNIST CNN with DP-SGD in Keras and report accuracy and epsilon.

The main job of tf_dp (``bash scripts/main.sh``). It trains the convolutional
network of the TF Privacy MNIST tutorial on the real MNIST data with
differentially private SGD, shows Keras progress bars, and prints the test
accuracy and the epsilon (delta = 1e-5) that the privacy ledger gives. It
writes plots of epsilon and accuracy against epochs to --out_dir.

Privacy claim, in words a user can repeat: "this model was trained so that
adding or removing any one training image changes the probability of any
outcome of training by at most a factor e^epsilon, except with probability
delta" (example-level (epsilon, delta)-DP, from the ledger of what was done).

  python tutorials/mnist_dpsgd_keras.py                      # short run
  python tutorials/mnist_dpsgd_keras.py --epochs=15 --target_epsilon=1.2
  python tutorials/mnist_dpsgd_keras.py --stack=tf_keras --query=per_layer
"""

import json
import os
import time

from absl import app
from absl import flags
import numpy as np

FLAGS = flags.FLAGS
flags.DEFINE_enum("stack", "keras3", ["keras3", "tf_keras"],
                  "Keras 3 (tf.keras on TF >= 2.16) or tf-keras (Keras 2).")
flags.DEFINE_enum("query", "flat", ["flat", "per_layer", "adaptive"],
                  "Clipping: one flat clip, per-layer clips, or an adaptive "
                  "clip tracking the median gradient norm.")
flags.DEFINE_float("epochs", 3, "Passes over the training data.")
flags.DEFINE_integer("batch_size", 256, "Expected batch (lot) size.")
flags.DEFINE_float("learning_rate", 0.25, "SGD learning rate.")
flags.DEFINE_float("l2_norm_clip", 1.5, "Per-example gradient clip norm.")
flags.DEFINE_float("noise_multiplier", 1.3, "Noise stddev / clip.")
flags.DEFINE_float("target_epsilon", None,
                   "If set, the noise multiplier is chosen to reach it.")
flags.DEFINE_float("delta", 1e-5, "The delta of (epsilon, delta).")
flags.DEFINE_enum("sampling", "poisson", ["poisson", "fixed_size",
                                          "shuffled"],
                  "Poisson lots (default), independent fixed-size lots "
                  "(replace-one neighbours, a larger epsilon), or shuffled "
                  "epochs (accounted like fixed-size: the conventional "
                  "approximation, with a warning).")
flags.DEFINE_integer("train_examples", 60000, "Use the first N examples.")
flags.DEFINE_integer("test_examples", 10000,
                     "Evaluate on the first N test examples.")
flags.DEFINE_string("mnist_path", None, "Optional path to MNIST.")
flags.DEFINE_string("out_dir", "out/mnist_dpsgd", "Where plots and a JSON "
                    "summary are written.")
flags.DEFINE_integer("verbose", 1, "Keras verbosity.")


def build_cnn(keras):
  """The CNN of the TF Privacy MNIST tutorial."""
  layers = keras.layers
  return keras.Sequential([
      layers.Input((28, 28, 1)),
      layers.Conv2D(16, 8, strides=2, padding="same", activation="relu"),
      layers.MaxPool2D(2, 1),
      layers.Conv2D(32, 4, strides=2, padding="valid", activation="relu"),
      layers.MaxPool2D(2, 1),
      layers.Flatten(),
      layers.Dense(32, activation="relu"),
      layers.Dense(10),
  ])


def make_query(n, q):
  import tf_dp  # pylint: disable=g-import-not-at-top
  if FLAGS.query != "adaptive":
    return None
  expected = q * n
  return tf_dp.dp_query.QuantileAdaptiveClipSumQuery(
      initial_l2_norm_clip=FLAGS.l2_norm_clip,
      noise_multiplier=FLAGS.noise_multiplier,
      target_unclipped_quantile=0.5, learning_rate=0.2,
      clipped_count_stddev=expected / 20, expected_num_records=expected)


def write_plots(history, out_dir):
  try:
    import matplotlib  # pylint: disable=g-import-not-at-top
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  except ImportError:
    print("matplotlib not installed: no plots written.")
    return
  epochs = np.arange(1, len(history["epsilon"]) + 1)
  fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
  axes[0].plot(epochs, history["epsilon"], marker="o")
  axes[0].set(xlabel="epoch", ylabel=f"epsilon (delta={FLAGS.delta:g})",
              title="Privacy spent")
  axes[1].plot(epochs, history["val_accuracy"], marker="o", label="test")
  axes[1].plot(epochs, history["accuracy"], marker=".", label="train")
  axes[1].set(xlabel="epoch", ylabel="accuracy", title="Accuracy")
  axes[1].legend()
  fig.tight_layout()
  fig.savefig(os.path.join(out_dir, "mnist_dpsgd.png"), dpi=100)
  print(f"Plots written to {os.path.join(out_dir, 'mnist_dpsgd.png')}")


def main(argv):
  del argv
  if FLAGS.stack == "tf_keras":
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tf_dp  # pylint: disable=g-import-not-at-top
  if FLAGS.stack == "tf_keras":
    import tf_keras as keras  # pylint: disable=g-import-not-at-top
  else:
    keras = tf.keras

  (x, y), (xt, yt) = tf_dp.data.load_mnist(FLAGS.mnist_path)
  x = (x[:FLAGS.train_examples, ..., None] / 255.0).astype("float32")
  y = y[:FLAGS.train_examples].astype("int32")
  xt = (xt[:FLAGS.test_examples, ..., None] / 255.0).astype("float32")
  yt = yt[:FLAGS.test_examples].astype("int32")
  n = len(x)
  q = FLAGS.batch_size / n
  sampling = FLAGS.sampling
  if FLAGS.target_epsilon:
    FLAGS.noise_multiplier = tf_dp.analysis.compute_noise_multiplier(
        n, FLAGS.batch_size, FLAGS.target_epsilon, FLAGS.epochs, FLAGS.delta,
        sampling="poisson" if sampling == "poisson" else "fixed_size")
    print(f"noise_multiplier={FLAGS.noise_multiplier:.4f} for target "
          f"epsilon {FLAGS.target_epsilon}")
  steps_per_epoch = int(round(1 / q))
  total_steps = int(round(FLAGS.epochs * steps_per_epoch))

  model = tf_dp.keras.make_private(build_cnn(keras))
  optimizer = tf_dp.DPOptimizer(
      keras.optimizers.SGD(FLAGS.learning_rate),
      l2_norm_clip=FLAGS.l2_norm_clip,
      noise_multiplier=FLAGS.noise_multiplier, population_size=n,
      sampling=sampling, sampling_probability=q if sampling == "poisson"
      else None,
      clipping="per_layer" if FLAGS.query == "per_layer" else "flat",
      dp_query=make_query(n, q), max_lots=total_steps + 10)
  model.compile(optimizer=optimizer,
                loss=keras.losses.SparseCategoricalCrossentropy(
                    from_logits=True),
                # Poisson batches are padded with weight-0 rows: weighted
                # metrics ignore them (plain `metrics=` would count them).
                weighted_metrics=["accuracy"])
  budget = tf_dp.keras.PrivacyBudget(delta=FLAGS.delta)
  epochs = int(np.ceil(FLAGS.epochs))
  if sampling == "shuffled":
    fit_args = dict(x=x, y=y, batch_size=FLAGS.batch_size, epochs=epochs)
  else:
    data = (tf_dp.data.poisson_sampled_batches(x, y, q, total_steps)
            if sampling == "poisson" else tf_dp.data.fixed_size_sampled_batches(
                x, y, FLAGS.batch_size, total_steps))
    fit_args = dict(x=data, steps_per_epoch=steps_per_epoch, epochs=epochs)
  start = time.time()
  history = model.fit(validation_data=(xt, yt), callbacks=[budget],
                      verbose=FLAGS.verbose, **fit_args).history
  seconds = time.time() - start
  _, test_accuracy = model.evaluate(xt, yt, verbose=0)
  eps, _ = tf_dp.analysis.compute_epsilon_from_ledger(
      optimizer.ledger, FLAGS.delta, accountant="pld")
  eps_rdp, order = tf_dp.analysis.compute_epsilon_from_ledger(
      optimizer.ledger, FLAGS.delta, accountant="rdp")
  os.makedirs(FLAGS.out_dir, exist_ok=True)
  summary = {"test_accuracy": float(test_accuracy), "epsilon": float(eps),
             "epsilon_rdp": float(eps_rdp), "delta": FLAGS.delta,
             "rdp_order": order,
             "noise_multiplier": FLAGS.noise_multiplier,
             "l2_norm_clip": FLAGS.l2_norm_clip, "epochs": FLAGS.epochs,
             "batch_size": FLAGS.batch_size, "sampling": sampling,
             "stack": FLAGS.stack, "query": FLAGS.query,
             "train_seconds": seconds, "history": history}
  with open(os.path.join(FLAGS.out_dir, "summary.json"), "w") as f:
    json.dump(summary, f, indent=1, default=float)
  with open(os.path.join(FLAGS.out_dir, "ledger.json"), "w") as f:
    f.write(optimizer.ledger.to_json())
  write_plots(history, FLAGS.out_dir)
  print(f"Trained {FLAGS.epochs:g} epochs in {seconds:.0f}s on {n} examples "
        f"({sampling} sampling, stack {FLAGS.stack}, query {FLAGS.query}).")
  print(f"test_accuracy={test_accuracy:.4f} epsilon={eps:.3f} "
        f"epsilon_rdp={eps_rdp:.3f} delta={FLAGS.delta:g}")


if __name__ == "__main__":
  app.run(main)
