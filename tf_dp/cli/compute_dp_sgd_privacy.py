r"""Command line: epsilon of a DP-SGD run.

  tf_dp-compute-dp-sgd-privacy --n=60000 --batch_size=256 \
      --noise_multiplier=1.1 --epochs=60 --delta=1e-5 [--accountant=pld]

(or ``python -m tf_dp.cli.compute_dp_sgd_privacy``) prints epsilon (by the
PLD accountant unless ``--accountant=rdp`` or ``--conversion`` is given; with
RDP also the Renyi order that achieved it). The library function is
``tf_dp.analysis.compute_dp_sgd_privacy``.
"""

import math

from absl import flags

from tf_dp.analysis import conversion as conversion_lib
from tf_dp.analysis import dp_sgd_privacy
from tf_dp.cli import run_flags


def main(argv):
  del argv
  f = flags.FLAGS
  accountant = dp_sgd_privacy.resolve_accountant(f.accountant,
                                                 conversion=f.conversion)
  eps, order = dp_sgd_privacy.compute_dp_sgd_privacy(
      f.n, f.batch_size, f.noise_multiplier, f.epochs, f.delta,
      sampling=f.sampling, conversion=f.conversion, accountant=accountant)
  steps = dp_sgd_privacy.dp_sgd_steps(f.n, f.batch_size, f.epochs)
  how = (f"{f.conversion or 'tight'} conversion" if accountant == "rdp"
         else "PLD accountant")
  print(f"DP-SGD with sampling probability = {100 * f.batch_size / f.n:.3g}% "
        f"({f.sampling}) and noise_multiplier = {f.noise_multiplier} "
        f"iterated over {steps} steps satisfies differential privacy with "
        f"eps = {eps:.4g} and delta = {f.delta} ({how}).")
  if not math.isnan(order):
    print(f"The optimal RDP order is {order:g}.")
    print(f"epsilon={eps:.6f} order={order:g}")
  else:
    print(f"epsilon={eps:.6f} accountant={accountant}")


def define_flags():
  """This tool's flags besides ``run_flags``'."""
  flags.DEFINE_float("noise_multiplier", 1.1, "Noise stddev / clip norm.")
  flags.DEFINE_enum("conversion", None, list(conversion_lib.CONVERSIONS),
                    "RDP only: RDP to (eps, delta) conversion (tight if not "
                    "given); giving it selects the RDP accountant.")


def run():
  """The console script."""
  run_flags.run(define_flags, main)


if __name__ == "__main__":
  run()
