"""A sampler's lots over the replicas of a ``tf.distribute`` strategy, on one
host or several, without a word of data or of the draw exchanged.

Every worker draws the same global lot (the same key, shared once, and the
same counter-based draws: ``tf.random.stateless_uniform`` keyed by the lot's
seed) and gathers only its replicas' parts of each batch: the batch's rows
cut into one part of consecutive rows per replica, as
``experimental_distribute_dataset`` cuts a global batch on one host. The
union of the parts is exactly the lot the ledger records, with n and q over
the whole population.
"""

from typing import Any, Optional

import numpy as np
import tensorflow as tf

from tf_dp.analysis import checks
from tf_dp.data import lots
from tf_dp.dp_query import strategy_context
from tf_dp.errors import SamplingMismatchError

# The key is broadcast as 16-bit words, each exact in float32 (what every
# collective implementation sums).
_WORDS = 4
# The attribute of a ``distribute_lots`` result that holds the
# ``DeclaredSampling`` of its lots.
_MARK = "_tf_dp_distributed_lots"


def shared_key(strategy: tf.distribute.Strategy, key: int) -> int:
  """The key of replica 0 (the chief's first replica), on every worker.

  Privacy contract: the key stays within the strategy's workers, which
  already exchange gradients and must be trusted; it is sent once (64 bits
  of a sum over the workers), never written to a checkpoint.

  Args:
    strategy: The strategy whose replicas will read the lots.
    key: This process's key (an int64).
  """
  if (strategy.num_replicas_in_sync == 1
      and strategy_context.strategy_workers(strategy) == 1):
    return int(key)
  unsigned = int(key) % 2 ** 64
  words = np.array([(unsigned >> (16 * i)) & 0xFFFF for i in range(_WORDS)],
                   np.float32)

  def contribution():
    replica = tf.distribute.get_replica_context().replica_id_in_sync_group
    first = tf.cast(tf.equal(replica, 0), tf.float32)
    return tf.constant(words) * first

  total = strategy.reduce(tf.distribute.ReduceOp.SUM,
                          strategy.run(contribution), axis=None)
  summed = [int(round(float(w))) for w in np.asarray(total)]
  value = sum(w << (16 * i) for i, w in enumerate(summed))
  return value - 2 ** 64 if value >= 2 ** 63 else value


def distribute_lots(strategy: tf.distribute.Strategy,
                    dataset: tf.data.Dataset,
                    passes: Optional[int] = 1) -> Any:
  """A sampler's dataset as a distributed dataset of ``strategy``: every
  replica reads its part of every batch of the same global lots.

  Use it in a custom loop under any strategy (``MirroredStrategy``,
  ``MultiWorkerMirroredStrategy``: ``strategy.run(step, args=(x, y, w))``
  for each element). Keras ``fit`` of a private model calls it itself when
  the strategy spans several workers. Over several workers, a sampler's
  dataset given to ``strategy.experimental_distribute_dataset`` instead
  would be drawn by each worker from its own key, and its parts would not
  make one lot: it allows auto-sharding by file only and has no files, so
  tf.data refuses it ("Did not find a shardable source").

  Privacy contract: the lots are the sampler's, drawn once for the whole
  strategy: each batch is cut into ``strategy.num_replicas_in_sync`` parts
  of consecutive rows (whole users for user lots), and replica ``r`` reads
  part ``r``, so every example (user) of a lot is in exactly one replica's
  part, once, and the parts of a step make one lot of the sampler's n and
  q. Poisson batches are padded with rows of weight 0 to a multiple of the
  replicas. Every worker draws the lots from the chief's key
  (``shared_key``), so the draws are as unpredictable as on one host; a
  sampler built with a fixed ``seed`` draws the same lots on every worker
  anyway.

  Args:
    strategy: A ``tf.distribute`` strategy.
    dataset: The dataset of a ``tf_dp.data`` sampler (or of
      ``with_class_weights`` on one), unchanged.
    passes: How many times the sampler's lots are drawn (each pass draws
      fresh lots, as a new iteration of ``dataset`` does); None: without
      end.

  Returns:
    A ``tf.distribute.DistributedDataset`` of ``(x, y, weight)`` (or
    ``(x, y)``) per-replica parts, marked with the dataset's
    ``DeclaredSampling``.

  Raises:
    SamplingMismatchError: if ``dataset`` is not a sampler's (lots declared
      with ``declare_sampling`` cannot be redrawn per worker), or its
      fixed-size batches do not split into equal parts.
  """
  if passes is not None:
    passes = checks.check_positive_int("passes", passes)
  recipe = lots.lot_recipe(dataset)
  declared = lots.declared_sampling(dataset)
  if recipe is None or declared is None:
    raise SamplingMismatchError(
        "distribute_lots needs the dataset of a tf_dp.data sampler "
        "(poisson_sampled_batches, fixed_size_sampled_batches, "
        "poisson_sampled_users, fixed_size_sampled_users), unchanged: every "
        "worker redraws its lots from the sampler's recipe. A dataset marked "
        "with declare_sampling, or derived with .map, .prefetch, ..., "
        "cannot be redrawn; under one host, pass it to fit as it is.")
  replicas = strategy.num_replicas_in_sync
  key = shared_key(strategy, recipe.key)
  # Raises now, not inside the workers' input functions, if fixed-size
  # batches do not split.
  recipe.dataset(key, replicas, 0, 1)

  def per_worker(context: tf.distribute.InputContext) -> tf.data.Dataset:
    local = replicas // context.num_input_pipelines
    return recipe.dataset(key, replicas, context.input_pipeline_id * local,
                          local).repeat(passes)

  distributed = strategy.distribute_datasets_from_function(per_worker)
  setattr(distributed, _MARK, declared)
  return distributed


def distributed_declaration(dataset: Any) -> Optional[lots.DeclaredSampling]:
  """The ``DeclaredSampling`` of a ``distribute_lots`` result, else None."""
  return getattr(dataset, _MARK, None)
