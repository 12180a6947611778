r"""Command line: the noise multiplier that meets a target epsilon.

  python -m tf_dp.analysis.compute_noise_multiplier --n=60000 \
      --batch_size=256 --target_epsilon=3 --epochs=60 --delta=1e-5 \
      [--accountant=pld]
"""

import math

from tf_dp.analysis import calibration
from tf_dp.analysis import dp_sgd_privacy as privacy_lib


def main(argv):
  del argv
  from absl import flags  # pylint: disable=g-import-not-at-top
  f = flags.FLAGS
  accountant = f.accountant or privacy_lib.DEFAULT_ACCOUNTANT
  z = calibration.compute_noise_multiplier(
      f.n, f.batch_size, f.target_epsilon, f.epochs, f.delta,
      sampling=f.sampling, accountant=accountant)
  eps, order = privacy_lib.compute_dp_sgd_privacy(
      f.n, f.batch_size, z, f.epochs, f.delta, sampling=f.sampling,
      accountant=accountant)
  how = (f"order {order:g}" if not math.isnan(order)
         else f"{accountant.upper()} accountant")
  print(f"noise_multiplier={z:.4f} gives epsilon={eps:.4f} "
        f"(delta={f.delta}, {how}).")


if __name__ == "__main__":
  from absl import app, flags  # pylint: disable=g-import-not-at-top
  flags.DEFINE_integer("n", 60000, "Number of training examples.")
  flags.DEFINE_integer("batch_size", 256, "Batch (lot) size.")
  flags.DEFINE_float("target_epsilon", 3.0, "Target epsilon.")
  flags.DEFINE_float("epochs", 60, "Number of epochs.")
  flags.DEFINE_float("delta", 1e-5, "Target delta.")
  flags.DEFINE_enum("sampling", "poisson", privacy_lib.SAMPLINGS,
                    "How batches are drawn: poisson or fixed_size.")
  flags.DEFINE_enum("accountant", None, list(privacy_lib.ACCOUNTANTS),
                    "pld (default) or rdp.")
  app.run(main)
