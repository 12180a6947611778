"""The flags that describe a DP-SGD run, shared by the command-line tools:
``--n``, ``--batch_size``, ``--epochs``, ``--delta``, ``--sampling`` and
``--accountant``; and the console scripts' entry point."""

from typing import Callable, List

from absl import app
from absl import flags

from tf_dp.analysis import dp_sgd_privacy
from tf_dp.sampling import ACCOUNTED
from tf_dp.sampling import Sampling


def define() -> None:
  """Defines the shared flags (once per process)."""
  flags.DEFINE_integer("n", 60000, "Number of training examples.")
  flags.DEFINE_integer("batch_size", 256, "Batch (lot) size.")
  flags.DEFINE_float("epochs", 60, "Number of epochs (may be fractional).")
  flags.DEFINE_float("delta", 1e-5, "Target delta.")
  flags.DEFINE_enum("sampling", Sampling.POISSON.value,
                    [s.value for s in ACCOUNTED],
                    "How batches are drawn: poisson or fixed_size.")
  flags.DEFINE_enum("accountant", None, list(dp_sgd_privacy.ACCOUNTANTS),
                    "pld (default) or rdp.")


def run(define_tool_flags: Callable[[], None],
        main: Callable[[List[str]], None]) -> None:
  """A console script: defines the shared flags and the tool's own, then
  runs ``main``."""
  define()
  define_tool_flags()
  app.run(main)
