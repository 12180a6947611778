r"""Command line: epsilon of a DP-SGD run.

  python -m tf_dp.analysis.compute_dp_sgd_privacy --n=60000 --batch_size=256 \
      --noise_multiplier=1.1 --epochs=60 --delta=1e-5

prints epsilon and the Renyi order that achieved it. The library function is
``tf_dp.analysis.compute_dp_sgd_privacy``.
"""

from tf_dp.analysis import conversion as conversion_lib
from tf_dp.analysis import dp_sgd_privacy


def main(argv):
  del argv
  from absl import flags  # pylint: disable=g-import-not-at-top
  f = flags.FLAGS
  eps, order = dp_sgd_privacy.compute_dp_sgd_privacy(
      f.n, f.batch_size, f.noise_multiplier, f.epochs, f.delta,
      sampling=f.sampling, conversion=f.conversion)
  steps = dp_sgd_privacy.dp_sgd_steps(f.n, f.batch_size, f.epochs)
  print(f"DP-SGD with sampling rate = {100 * f.batch_size / f.n:.3g}% "
        f"({f.sampling}) and noise_multiplier = {f.noise_multiplier} "
        f"iterated over {steps} steps satisfies differential privacy with "
        f"eps = {eps:.4g} and delta = {f.delta} "
        f"({f.conversion} conversion).")
  print(f"The optimal RDP order is {order:g}.")
  print(f"epsilon={eps:.6f} order={order:g}")


def define_flags():
  from absl import flags  # pylint: disable=g-import-not-at-top
  flags.DEFINE_integer("n", 60000, "Number of training examples.")
  flags.DEFINE_integer("batch_size", 256, "Batch (lot) size.")
  flags.DEFINE_float("noise_multiplier", 1.1, "Noise stddev / clip norm.")
  flags.DEFINE_float("epochs", 60, "Number of epochs (may be fractional).")
  flags.DEFINE_float("delta", 1e-5, "Target delta.")
  flags.DEFINE_enum("sampling", "poisson", list(dp_sgd_privacy.SAMPLINGS),
                    "How batches are drawn.")
  flags.DEFINE_enum("conversion", "tight", list(conversion_lib.CONVERSIONS),
                    "RDP to (eps, delta) conversion.")


if __name__ == "__main__":
  from absl import app  # pylint: disable=g-import-not-at-top
  define_flags()
  app.run(main)
