r"""TF Privacy's ``compute_dp_sgd_privacy`` command, with its flags.

  python -m tf_dp.compat.tensorflow_privacy.privacy.analysis.compute_dp_sgd_privacy \
      --N=60000 --batch_size=256 --noise_multiplier=1.1 --epochs=60 \
      --delta=1e-5 [--used_microbatching=false] [--max_examples_per_user=3] \
      [--accountant_type=PLD]

prints ``compute_dp_sgd_privacy_statement`` for those numbers (flags and
defaults as TF Privacy's: ``--N`` is the number of training examples,
``--delta`` 1e-6, ``--used_microbatching`` true, ``--accountant_type``
RDP). tf_dp's own command is ``python -m tf_dp.analysis.
compute_dp_sgd_privacy`` (lower-case ``--n``, epsilon only). Pure Python:
no TensorFlow is imported.
"""

from tf_dp.compat.tensorflow_privacy.privacy.analysis import compute_dp_sgd_privacy_lib as lib


def main(argv):
  del argv
  from absl import flags  # pylint: disable=g-import-not-at-top
  f = flags.FLAGS
  print(lib.compute_dp_sgd_privacy_statement(
      f.N, f.batch_size, f.epochs, f.noise_multiplier, f.delta,
      f.used_microbatching, f.max_examples_per_user,
      lib.AccountantType(f.accountant_type)))


def define_flags():
  """TF Privacy's flags (``N``, ``batch_size``, ``noise_multiplier`` and
  ``epochs`` required)."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  flags.DEFINE_integer("N", None, "Number of training examples.")
  flags.DEFINE_integer("batch_size", None,
                       "Examples per batch, whatever the microbatching.")
  flags.DEFINE_float("noise_multiplier", None,
                     "Noise stddev divided by the clip norm.")
  flags.DEFINE_float("epochs", None, "Number of epochs (may be fractional).")
  flags.DEFINE_float("delta", 1e-6, "Target delta.")
  flags.DEFINE_bool("used_microbatching", True,
                    "Whether microbatches of more than one example were "
                    "clipped (doubles the sensitivity).")
  flags.DEFINE_integer("max_examples_per_user", None,
                       "Bound on a user's examples, for user-level epsilon.")
  flags.DEFINE_enum("accountant_type", "RDP", ["RDP", "PLD"],
                    "The accountant.")
  flags.mark_flags_as_required(["N", "batch_size", "noise_multiplier",
                                "epochs"])


if __name__ == "__main__":
  from absl import app  # pylint: disable=g-import-not-at-top
  define_flags()
  app.run(main)
