r"""Command line: the noise multiplier that meets a target epsilon.

  tf_dp-compute-noise-multiplier --n=60000 --batch_size=256 \
      --target_epsilon=3 --epochs=60 --delta=1e-5 [--accountant=pld]

(or ``python -m tf_dp.cli.compute_noise_multiplier``). The library function
is ``tf_dp.analysis.compute_noise_multiplier``.
"""

import math

from absl import flags

from tf_dp.analysis import calibration
from tf_dp.analysis import dp_sgd_privacy
from tf_dp.cli import run_flags


def main(argv):
  del argv
  f = flags.FLAGS
  accountant = f.accountant or dp_sgd_privacy.DEFAULT_ACCOUNTANT
  z = calibration.compute_noise_multiplier(
      f.n, f.batch_size, f.target_epsilon, f.epochs, f.delta,
      sampling=f.sampling, accountant=accountant)
  eps, order = dp_sgd_privacy.compute_dp_sgd_privacy(
      f.n, f.batch_size, z, f.epochs, f.delta, sampling=f.sampling,
      accountant=accountant)
  how = (f"order {order:g}" if not math.isnan(order)
         else f"{accountant.upper()} accountant")
  print(f"noise_multiplier={z:.4f} gives epsilon={eps:.4f} "
        f"(delta={f.delta}, {how}).")


def define_flags():
  """This tool's flags besides ``run_flags``'."""
  flags.DEFINE_float("target_epsilon", 3.0, "Target epsilon.")


def run():
  """The console script."""
  run_flags.run(define_flags, main)


if __name__ == "__main__":
  run()
