"""Fixed-size samples as ``tf.data``: an independent uniform subset per lot.

Keras's ``fit(shuffle=True)`` takes each example once per epoch: its
batches are not independent samples, and the fixed-size accountant's
guarantee does not strictly apply to them (Chua et al. 2024). This sampler
draws what the accountant assumes: every lot is a uniformly random subset
of exactly ``batch_size * batches_per_lot`` distinct examples, independent
of every other lot. Train with ``DPOptimizer(..., sampling="fixed_size")``.
"""

from typing import Any, Optional

import tensorflow as tf

from tf_dp.analysis import checks
from tf_dp.data import lots
from tf_dp.sampling import Sampling


def fixed_size_sampled_batches(x: Any, y: Any, batch_size: int, num_steps: int,
                               seed: Optional[int] = None,
                               batches_per_lot: int = 1) -> tf.data.Dataset:
  """A dataset of ``num_steps`` lots of uniformly sampled examples.

  Privacy contract: each lot is a uniformly random subset (without
  replacement) of ``batch_size * batches_per_lot`` of the ``n`` examples,
  drawn independently of all other lots, also across re-iterations of the
  dataset; the lot is split into ``batches_per_lot`` batches.

  Args:
    x: In-memory inputs (an array or a nest of arrays) of ``n`` examples.
    y: Their labels (an array or a nest of arrays), one per example.
    batch_size: Examples per batch.
    num_steps: Number of lots.
    seed: None (OS entropy) or an int for reproducible tests.
    batches_per_lot: Batches per lot (``gradient_accumulation_steps``).

  Returns:
    A prefetched ``tf.data.Dataset`` marked with how its lots are drawn
    (see ``tf_dp.data.declare_sampling``): pass it to ``fit`` unchanged,
    since a dataset derived from it (``.map``, ``.prefetch``, ...) carries
    no mark.
  """
  n = len(tf.nest.flatten(x)[0])
  batches_per_lot = lots.check_batches_per_lot(batches_per_lot)
  lot = checks.check_positive_int("batch_size", batch_size) * batches_per_lot
  if not 1 <= lot <= n:
    raise ValueError(f"batch_size * batches_per_lot must lie in [1, n={n}]; "
                     f"got {lot}.")
  choose = lambda draws: (tf.math.top_k(draws, lot).indices, None)
  return lots.lot_dataset(x, y, num_steps, seed, batches_per_lot, choose,
                          stream=1, sampling=Sampling.FIXED_SIZE)
