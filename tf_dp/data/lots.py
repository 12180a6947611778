"""What the lot samplers share: fresh lot seeds, gathering and splitting,
and the mark that says how a dataset's lots were drawn.

A sampler chooses, from ``n`` random words drawn for a lot, the rows of the
lot (and optionally a weight per row); this module draws the words from a
per-lot seed that is fresh on every iteration of the dataset, gathers the
rows and splits the lot into ``batches_per_lot`` batches of equal size.

The words are int64, uniform over all 2^64 values, not float32 uniforms:
those take only 2^23 values, so ``u < q`` would include an example with
probability ``ceil(q 2^23) / 2^23``, above the q the ledger records (up to
8 times q = 1e-6, and 2^-23 for every smaller q), and a rank of n float32
draws ties about ``n^2 / 2^24`` times (a tie is broken by position, so a
fixed-size lot would favour low indices). A word is below ``included``'s
threshold with probability in ``(q - 2^-64, q]``, and n words tie with
probability below ``n^2 / 2^65`` (2e-9 for a million).

The dataset a sampler returns carries a ``DeclaredSampling`` (read with
``declared_sampling``); ``declare_sampling`` puts one on a dataset of the
caller's own sampler. Keras ``fit`` trusts a dataset as Poisson or
fixed-size lots only through this mark. A dataset derived from a marked one
(``.map``, ``.prefetch``, ...) is a new object and carries no mark.
"""

import dataclasses
import fractions
import math
import os
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np
import tensorflow as tf

from tf_dp.analysis import checks
from tf_dp.errors import SamplingMismatchError
from tf_dp.sampling import PrivacyUnit
from tf_dp.sampling import Sampling


# The attribute of a ``tf.data.Dataset`` that holds its ``DeclaredSampling``.
_MARK = "_tf_dp_declared_sampling"

# The samplings a mark may declare: those whose lots Keras cannot draw.
DECLARABLE_SAMPLINGS = (Sampling.POISSON, Sampling.FIXED_SIZE)


@dataclasses.dataclass(frozen=True)
class DeclaredSampling:
  """How the lots of a dataset were drawn.

  Attributes:
    sampling: ``"poisson"`` or ``"fixed_size"``.
    sampling_probability: q of Poisson lots; None for fixed-size lots.
    population_size: n, the examples lots are drawn from; None if the
      declaration leaves it to the optimizer's ``population_size``.
    batches_per_lot: Consecutive batches that make one lot.
    seed: The sampler's fixed seed, or None (fresh OS entropy): every
      dataset built with one seed draws the same lots.
    privacy_unit: ``"example"``, or ``"user"``: the lots are drawn over
      users (n and q count users), each user's ``max_examples_per_user``
      consecutive rows of a batch holding that user's examples in the lot.
    max_examples_per_user: k of user-level lots; None per example.
  """
  sampling: str
  sampling_probability: Optional[float]
  population_size: Optional[int]
  batches_per_lot: int
  seed: Optional[int] = None
  privacy_unit: str = PrivacyUnit.EXAMPLE
  max_examples_per_user: Optional[int] = None


def declare_sampling(dataset: tf.data.Dataset, sampling: str,
                     sampling_probability: Optional[float] = None,
                     population_size: Optional[int] = None,
                     batches_per_lot: int = 1,
                     privacy_unit: str = PrivacyUnit.EXAMPLE,
                     max_examples_per_user: Optional[int] = None
                     ) -> tf.data.Dataset:
  """Marks ``dataset`` as lots drawn with ``sampling`` and returns it.

  ``fit`` under ``DPOptimizer(sampling="poisson")`` or ``"fixed_size"``
  trains only on a dataset marked with the optimizer's sampling (and q,
  population and ``gradient_accumulation_steps``). The samplers
  ``tf_dp.data.poisson_sampled_batches`` and
  ``tf_dp.data.fixed_size_sampled_batches`` mark their datasets
  themselves; use this for lots drawn by a sampler of your own.

  Privacy contract: the caller's. Marking promises that every lot of
  ``dataset`` (``batches_per_lot`` consecutive batches) is drawn as
  declared, independently of every other lot, also across re-iterations:
  for ``"poisson"``, every example of the ``population_size`` is in a lot
  independently with probability ``sampling_probability`` (padding rows
  carry weight 0); for ``"fixed_size"``, a lot is a uniformly random subset
  of a fixed number of distinct examples. The ledger records the lots as
  declared, and the epsilon computed from it holds only if they were.

  Args:
    dataset: A ``tf.data.Dataset`` of the lots' batches (marked in place;
      a dataset derived from it later carries no mark).
    sampling: ``"poisson"`` or ``"fixed_size"``.
    sampling_probability: q in (0, 1] for ``"poisson"``; None for
      ``"fixed_size"``.
    population_size: Optional n, the number of examples the lots are drawn
      from; when given, ``fit`` requires the optimizer's
      ``population_size`` to equal it.
    batches_per_lot: Consecutive batches per lot (the optimizer's
      ``gradient_accumulation_steps``).
    privacy_unit: ``"example"``, or ``"user"``: the lots are drawn over
      users as declared (n and q count users), and each user in a lot
      occupies ``max_examples_per_user`` consecutive rows of its batch
      (padding rows of weight 0), holding at most that many of the user's
      examples.
    max_examples_per_user: k, with ``privacy_unit="user"`` only.

  Returns:
    ``dataset``.

  Raises:
    TypeError: if ``dataset`` is not a ``tf.data.Dataset``.
    ValueError: naming the argument that is out of range.
    SamplingMismatchError: if ``dataset`` already carries another mark (a
      sampler's mark says how its lots were drawn; it cannot be declared
      otherwise).
  """
  if not isinstance(dataset, tf.data.Dataset):
    raise TypeError(
        f"dataset must be a tf.data.Dataset of the lots' batches; got "
        f"{type(dataset).__name__}. Build one with tf.data.Dataset."
        f"from_tensor_slices(...).batch(...) or use a tf_dp.data sampler.")
  if not (isinstance(sampling, str) and sampling in DECLARABLE_SAMPLINGS):
    raise ValueError(
        f"sampling must be one of {DECLARABLE_SAMPLINGS}; got {sampling!r}."
        f" Lots Keras draws itself (arrays given to fit) need no "
        f"declaration: train them with DPOptimizer(sampling=\"shuffled\").")
  sampling = Sampling(sampling)
  if sampling is Sampling.POISSON:
    sampling_probability = checks.check_real(
        "sampling_probability", sampling_probability, low=0.0, high=1.0,
        low_open=True)
  elif sampling_probability is not None:
    raise ValueError(
        f"sampling_probability is the q of Poisson lots; fixed-size lots "
        f"have none (got {sampling_probability!r}). Leave it out.")
  if population_size is not None:
    population_size = checks.check_positive_int("population_size",
                                                population_size)
  unit = PrivacyUnit.check("privacy_unit", privacy_unit)
  if (unit is PrivacyUnit.USER) != (max_examples_per_user is not None):
    raise ValueError(
        f"max_examples_per_user (got {max_examples_per_user!r}) is given "
        f"exactly when privacy_unit='user' (got {privacy_unit!r}): it is "
        f"the number of rows each user takes in a batch.")
  if max_examples_per_user is not None:
    max_examples_per_user = checks.check_positive_int(
        "max_examples_per_user", max_examples_per_user)
  return _mark(dataset, DeclaredSampling(
      sampling, sampling_probability, population_size,
      check_batches_per_lot(batches_per_lot), None, unit,
      max_examples_per_user))


def _mark(dataset, declared):
  """Puts ``declared`` on ``dataset`` unless it carries another mark."""
  earlier = declared_sampling(dataset)
  if earlier is not None and earlier != declared:
    raise SamplingMismatchError(
        f"dataset is already marked as lots drawn with {earlier}; it cannot "
        f"be declared {declared}. A sampler's mark says how its lots were "
        f"drawn: draw new lots with the sampling you need instead.")
  setattr(dataset, _MARK, declared)
  return dataset


def with_class_weights(dataset: tf.data.Dataset,
                       class_weight: Dict[Any, float]) -> tf.data.Dataset:
  """The lots of a marked dataset of ``(x, y, weight)`` batches with each
  row's weight multiplied by its label's class weight, marked alike.

  Privacy contract: the lots are the same rows, drawn as ``dataset``'s mark
  declares; only weights change, and each row's new weight depends on its
  own label alone (padding rows keep weight 0). Keras's ``class_weight``
  semantics: sparse labels ``[B]`` or ``[B, 1]`` index the classes,
  one-hot labels ``[B, C]`` by their argmax; a class without a weight
  counts 1.

  Args:
    dataset: A dataset marked by a sampler or ``declare_sampling`` whose
      elements are ``(x, y, weight)`` with one label tensor ``y``.
    class_weight: ``{class index: weight}``.

  Raises:
    ValueError: if the elements are not ``(x, y, weight)`` with a single
      label tensor, or a class weight is negative.
  """
  declared = declared_sampling(dataset)
  spec = dataset.element_spec
  if declared is None or not isinstance(spec, tuple) or len(spec) != 3 or (
      not isinstance(spec[1], tf.TensorSpec)):
    raise ValueError(
        "class_weight with a sampler's lots needs a marked dataset of (x, y, "
        "weight) batches with one label tensor y; for several outputs, "
        "weight the examples in the loss instead.")
  if any(not float(w) >= 0 for w in class_weight.values()):
    raise ValueError(f"class_weight must hold weights >= 0; got "
                     f"{class_weight!r}.")
  size = max(int(k) for k in class_weight) + 1
  table = tf.constant([float(class_weight.get(i, 1.0)) for i in range(size)],
                      tf.float32)
  one_hot = spec[1].shape.rank == 2 and (spec[1].shape[-1] or 1) > 1

  def fold(x, y, weight):
    labels = tf.argmax(y, -1) if one_hot else tf.reshape(y, [-1])
    labels = tf.cast(labels, tf.int32)
    inside = (labels >= 0) & (labels < size)
    factor = tf.where(inside, tf.gather(table, tf.clip_by_value(
        labels, 0, size - 1)), tf.ones_like(table[0]))
    return x, y, tf.cast(weight, tf.float32) * factor

  weighted = _mark(dataset.map(fold), declared)
  recipe = lot_recipe(dataset)
  if recipe is not None:
    setattr(weighted, _RECIPE, dataclasses.replace(
        recipe, maps=recipe.maps + (fold,)))
  return weighted


def declared_sampling(dataset: tf.data.Dataset) -> Optional["DeclaredSampling"]:
  """The ``DeclaredSampling`` of ``dataset``, or None if it has none."""
  return getattr(dataset, _MARK, None)


def check_batches_per_lot(batches_per_lot: Any) -> int:
  return checks.check_positive_int(
      "batches_per_lot", batches_per_lot,
      " It is the DPOptimizer's gradient_accumulation_steps.")


def included(draws: tf.Tensor, probability: float) -> tf.Tensor:
  """Whether each of ``draws`` (int64 words, uniform over all 2^64 values)
  puts its example in a Poisson lot of ``probability`` q: True with
  probability ``floor(q 2^64) / 2^64``, in ``(q - 2^-64, q]``, never above
  the q the ledger records (q itself when q 2^64 is an integer, such as
  q = 1 or 1/2)."""
  count = math.floor(fractions.Fraction(probability) * 2 ** 64)
  if count == 0:
    return tf.zeros_like(draws, tf.bool)
  # Words run from -2^63; the first ``count`` of them are included.
  return draws <= tf.constant(-2 ** 63 + count - 1, tf.int64)


# The attribute of a sampler's dataset that holds its ``LotRecipe``.
_RECIPE = "_tf_dp_lot_recipe"


@dataclasses.dataclass(frozen=True)
class LotRecipe:
  """How a sampler's dataset is rebuilt with its lots' batches in parts,
  one part per replica of a ``tf.distribute`` strategy
  (``tf_dp.data.distribute_lots``).

  Attributes:
    build: ``build(key, parts, first, count)``: the dataset of the lots
      drawn from ``key`` whose batches are each cut into ``parts``
      consecutive parts of equal size, holding parts ``first`` to
      ``first + count - 1`` of every batch, one element per part, in
      order.
    key: The sampler's key (its ``seed``, or OS entropy).
    batches: Batches of the whole dataset (lots x ``batches_per_lot``).
    maps: Functions applied to the rebuilt dataset's elements, in order
      (``with_class_weights``'s).
  """
  build: Callable[[int, int, int, int], tf.data.Dataset]
  key: int
  batches: int
  maps: Tuple[Callable[..., Any], ...] = ()

  def dataset(self, key: int, parts: int, first: int,
              count: int) -> tf.data.Dataset:
    """The parts ``first`` to ``first + count - 1`` of every batch of the
    lots drawn from ``key`` (see ``build``), with ``maps`` applied."""
    dataset = self.build(key, parts, first, count)
    for fn in self.maps:
      dataset = dataset.map(fn)
    return dataset


# A sampler's dataset is never split by tf.distribute's auto-sharding:
# over several workers, each worker would split its own draw (from its own
# key), and the parts of a step would come from different lots (an example
# could be in two). It has no files, so sharding by file fails, naming "no
# shardable source"; distribute_lots (and fit) redraw it per worker
# instead, which no auto-sharding touches. One host does not shard.
_SHARD_BY_FILE_ONLY = tf.data.Options()
_SHARD_BY_FILE_ONLY.experimental_distribute.auto_shard_policy = (
    tf.data.experimental.AutoShardPolicy.FILE)


def lot_recipe(dataset: Any) -> Optional[LotRecipe]:
  """The ``LotRecipe`` of a sampler's dataset (or one derived by
  ``with_class_weights``), else None."""
  return getattr(dataset, _RECIPE, None)


def random_key() -> int:
  """A fresh int64 sampler key from OS entropy."""
  return int(np.frombuffer(os.urandom(8), np.int64)[0])


def lot_dataset(
    x: Any, y: Any, num_lots: int, seed: Optional[int], batches_per_lot: int,
    choose: Callable[[tf.Tensor], Tuple[tf.Tensor, Optional[tf.Tensor]]],
    stream: int, sampling: Sampling,
    sampling_probability: Optional[float] = None,
    num_draws: Optional[int] = None,
    users: Optional[Tuple[int, int]] = None) -> tf.data.Dataset:
  """``num_lots`` lots as ``batches_per_lot`` batches each, prefetched and
  marked as drawn with ``sampling`` from the ``n`` examples (or users), and
  carrying the ``LotRecipe`` that rebuilds them in parts per replica.

  Args:
    x, y: In-memory arrays (or nests) with ``n`` examples.
    num_lots: Number of lots.
    seed: None (OS entropy) or an int for reproducible tests.
    batches_per_lot: Batches each lot is split into.
    choose: ``f(draws [num_draws]) -> (row indices, weights or None)``;
      the number of rows must be a multiple of ``batches_per_lot``. The
      draws are independent int64 words, uniform over all 2^64 values: a
      chooser ranks them (``tf.math.top_k``, ``tf.argsort``) or compares
      them with ``included``'s threshold.
    stream: An int that separates the samplers' random streams.
    sampling: What ``choose`` draws: ``"poisson"`` or ``"fixed_size"``.
    sampling_probability: q of Poisson lots.
    num_draws: Uniforms per lot (default n).
    users: ``(number of users, max_examples_per_user)`` when the lots are
      drawn over users (the mark then says so), else None.
  """
  key = random_key() if seed is None else int(seed)
  n = len(tf.nest.flatten(x)[0])
  xs = tf.nest.map_structure(tf.constant, x)
  ys = tf.nest.map_structure(tf.constant, y)
  unit_rows = 1 if users is None else users[1]

  def build(key, parts, first, count):
    def sample(lot_seed):
      draws = tf.random.stateless_uniform(
          [num_draws or n],
          seed=tf.stack([lot_seed, tf.constant(stream, tf.int64)]),
          minval=None, maxval=None, dtype=tf.int64)
      index, weight = choose(draws)
      cut = lambda t: _batch_parts(t, batches_per_lot, unit_rows, parts,
                                   first, count, sampling)
      index = cut(index)
      if weight is None:
        gather = lambda t: tf.gather(t, index)
        return (tf.nest.map_structure(gather, xs),
                tf.nest.map_structure(gather, ys))
      weight = cut(weight)
      # Padding rows (weight 0) hold zeros, not copies of an example: they
      # carry no one's data, whatever a later consumer sums over them.
      present = weight > 0
      def gather_present(t):
        rows = tf.gather(t, index)
        mask = tf.reshape(present, present.shape.as_list() +
                          [1] * (len(rows.shape) - 2))
        return tf.where(mask, rows, tf.zeros_like(rows))
      return (tf.nest.map_structure(gather_present, xs),
              tf.nest.map_structure(gather_present, ys), weight)

    # Fresh lot seeds on every iteration: re-iterating the dataset (e.g. one
    # pass per Keras epoch) never repeats a sample.
    lot_seeds = tf.data.Dataset.random(seed=key,
                                       rerandomize_each_iteration=True)
    return lot_seeds.take(num_lots).map(sample).unbatch().prefetch(
        tf.data.AUTOTUNE).with_options(_SHARD_BY_FILE_ONLY)

  dataset = build(key, 1, 0, 1)
  unit, population, k = PrivacyUnit.EXAMPLE, n, None
  if users is not None:
    unit, (population, k) = PrivacyUnit.USER, users
  setattr(dataset, _RECIPE, LotRecipe(build, key, num_lots * batches_per_lot))
  return _mark(dataset, DeclaredSampling(
      sampling, sampling_probability, population, batches_per_lot,
      None if seed is None else int(seed), unit, k))


def _batch_parts(t: tf.Tensor, batches_per_lot: int, unit_rows: int,
                 parts: int, first: int, count: int,
                 sampling: Sampling) -> tf.Tensor:
  """A lot's rows ``t`` (indices or weights, ``[rows]``) as
  ``[batches_per_lot * count, rows of a part]``: each of the lot's
  ``batches_per_lot`` batches cut into ``parts`` consecutive parts of whole
  units (``unit_rows`` rows: 1 per example, k per user), of which parts
  ``first`` to ``first + count - 1``, batch by batch.

  A Poisson batch whose units do not split evenly is padded with units of
  weight 0 (index 0, dropped by the weight); a fixed-size batch cannot be
  (its size is what the ledger counts) and is refused.
  """
  rows = t.shape[0]
  units = rows // (batches_per_lot * unit_rows)
  out = tf.reshape(t, [batches_per_lot, units * unit_rows])
  extra = -units % parts
  if extra:
    if sampling is not Sampling.POISSON:
      noun = "examples" if unit_rows == 1 else "users"
      raise SamplingMismatchError(
          f"fixed-size batches of {units} {noun} cannot be cut into "
          f"{parts} equal parts, one per replica of the tf.distribute "
          f"strategy; their size is what the ledger records, so they are "
          f"not padded. Draw batches of a multiple of {parts} {noun} "
          f"(batch_size or users_per_batch).")
    out = tf.concat([out, tf.zeros([batches_per_lot, extra * unit_rows],
                                   t.dtype)], axis=1)
  per_part = (units + extra) // parts * unit_rows
  out = out[:, first * per_part:(first + count) * per_part]
  return tf.reshape(out, [batches_per_lot * count, per_part])
