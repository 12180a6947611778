"""Poisson-sampled batches as ``tf.data``: the sampling the accountant assumes.

Each step includes every example independently with probability ``q``. The
sample has a random size, so it is padded to ``max_batch_size`` with rows of
zeros of weight 0 (a fixed shape: graphs are not retraced); weights are 1 for
the sampled examples. Padding rows have zero loss, hence zero gradient, so
they contribute nothing to the clipped sum, and they hold no example's data.
Train with ``DPOptimizer(..., sampling="poisson", sampling_probability=q)``;
the ledger then records Poisson samples and the average uses the public
denominator ``q * n``.

The sampling draws come from a seed taken from OS entropy (unless given):
predictable sampling would weaken the amplification the accountant credits.
"""

import math
from typing import Any, Optional

import tensorflow as tf

from tf_dp.analysis import checks
from tf_dp.data import lots
from tf_dp.sampling import Sampling


def default_max_batch_size(n: int, q: float) -> int:
  """Expected size + 8 standard deviations (overflow odds below 1e-15)."""
  mean = q * n
  return int(min(n, math.ceil(mean + 8 * math.sqrt(mean * (1 - q)) + 8)))


def poisson_sampled_batches(x: Any, y: Any, sampling_probability: float,
                            num_steps: int,
                            max_batch_size: Optional[int] = None,
                            seed: Optional[int] = None,
                            batches_per_lot: int = 1) -> tf.data.Dataset:
  """A dataset of ``num_steps`` Poisson lots, as ``(x, y, weight)`` batches.

  Privacy contract: every example is in each lot independently with
  probability ``sampling_probability`` (exactly ``floor(q 2^64) / 2^64``:
  never above q, less by under 2^-64; ``tf_dp.data.lots.included``); lots
  are independent, also across re-iterations of the dataset (each
  iteration draws fresh lots). A lot is
  one Poisson draw, split into ``batches_per_lot`` consecutive batches of
  equal padded size (for ``DPOptimizer(gradient_accumulation_steps=
  batches_per_lot)``): an example is in a lot at most once, and the lot is
  the sample the ledger records. A lot larger than its padded size raises
  an error instead of being truncated (truncation would change the
  sampling the ledger records).

  Args:
    x: In-memory inputs (an array or a nest of arrays) of ``n`` examples.
    y: Their labels (an array or a nest of arrays), one per example.
    sampling_probability: q in (0, 1], the probability per lot.
    num_steps: Number of lots; ``round(epochs / q)`` for epochs.
    max_batch_size: Padded size of a lot; by default mean + 8 sd.
    seed: None (OS entropy) or an int for reproducible tests.
    batches_per_lot: Batches each lot is split into (the dataset yields
      ``num_steps * batches_per_lot`` batches).

  Returns:
    A prefetched ``tf.data.Dataset`` marked with how its lots are drawn
    (see ``tf_dp.data.declare_sampling``): pass it to ``fit`` unchanged,
    since a dataset derived from it (``.map``, ``.prefetch``, ...) carries
    no mark.
  """
  n = len(tf.nest.flatten(x)[0])
  sampling_probability = checks.check_real(
      "sampling_probability", sampling_probability, low=0.0, high=1.0,
      low_open=True)
  batches_per_lot = lots.check_batches_per_lot(batches_per_lot)
  if max_batch_size is None:
    max_batch_size = default_max_batch_size(n, sampling_probability)
  per_batch = -(-int(max_batch_size) // batches_per_lot)
  lot_rows = per_batch * batches_per_lot

  def choose(draws):
    chosen = tf.where(lots.included(draws, sampling_probability))[:, 0]
    size = tf.shape(chosen)[0]
    tf.debugging.assert_less_equal(
        size, lot_rows, message=(
            "tf_dp: a Poisson sample exceeded max_batch_size; raise it."))
    pad = lot_rows - size
    # Static lot_rows rows: the batches' static shape lets the fast path
    # take its per-layer methods that need the batch size.
    index = tf.ensure_shape(
        tf.concat([chosen, tf.zeros([pad], tf.int64)], axis=0), [lot_rows])
    weight = tf.ensure_shape(
        tf.concat([tf.ones([size]), tf.zeros([pad])], axis=0), [lot_rows])
    return index, weight

  return lots.lot_dataset(x, y, num_steps, seed, batches_per_lot, choose,
                          stream=0, sampling=Sampling.POISSON,
                          sampling_probability=sampling_probability)
