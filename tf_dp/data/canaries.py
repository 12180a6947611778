"""Canaries for one-run privacy audits, and how they enter the training data.

A one-run audit (Steinke, Nasr & Jagielski 2023, Algorithm 1) draws ``m``
canaries, includes each in the training data independently with
probability 1/2, trains once, and asks how well the trained model tells
the included canaries from the others (``tf_dp.keras.audit_canaries``;
the bound, ``tf_dp.analysis.one_run``). Three kinds of canaries:

* ``"mislabeled"``: examples of a pool the run does not otherwise train on
  (a held-out split), each with a random wrong label; black-box audits
  score them by the trained model's loss.
* ``"out_of_distribution"``: inputs drawn uniformly over the range of the
  data's values, with random labels; black-box, by loss.
* ``"dirac"``: gradient-space canaries for white-box audits of the DP
  step: a canary is a row whose gradient is ``gradient_norm`` times a
  basis vector of its own, on an audit variable that the data never
  touches (``tf_dp.keras.with_dirac_canaries``); scored by how far that
  variable moved.

The inclusion bits are drawn with the canaries and stay in the
``Canaries`` object: ``mix_canaries`` returns training data holding the
included canaries and nothing of the others, and the population size to
give ``DPOptimizer`` (``population_size``): the examples plus the included
canaries, so that the ledger's ε is the ε of the run that was audited.
Included canaries are appended after the data: train with a sampler
(``tf_dp.data.poisson_sampled_batches``), shuffled ``fit`` on arrays, or a
pipeline shuffled after ``mix_canaries_into_dataset`` over all its
elements.
"""

import dataclasses
import enum
from typing import Any, Optional

import numpy as np
import tensorflow as tf

from tf_dp.analysis import checks


class CanaryKind(str, enum.Enum):
  """What a canary is (see the module's doc); equal to its string."""
  MISLABELED = "mislabeled"
  OUT_OF_DISTRIBUTION = "out_of_distribution"
  DIRAC = "dirac"

  def __str__(self) -> str:
    return self.value


# The input-space kinds: canaries that are (x, y) examples.
INPUT_SPACE_KINDS = (CanaryKind.MISLABELED, CanaryKind.OUT_OF_DISTRIBUTION)


@dataclasses.dataclass(frozen=True, eq=False)
class Canaries:
  """``m`` canaries and their secret inclusion bits.

  Attributes:
    kind: a ``CanaryKind``.
    included: bool ``[m]``: whether each canary is in the training data
      (drawn independently with probability 1/2; keep it from the scorer).
    x: the inputs of input-space canaries, ``[m, ...]``; None for Dirac.
    y: their labels (class indices), ``[m]``; None for Dirac.
    gradient_norm: the norm of a Dirac canary's gradient; None otherwise.
  """
  kind: CanaryKind
  included: np.ndarray
  x: Optional[np.ndarray] = None
  y: Optional[np.ndarray] = None
  gradient_norm: Optional[float] = None

  @property
  def num_canaries(self) -> int:
    """m, the canaries whose inclusion was drawn."""
    return int(self.included.size)

  @property
  def num_included(self) -> int:
    """The canaries in the training data."""
    return int(np.sum(self.included))

  def __repr__(self) -> str:
    return (f"Canaries(kind={self.kind.value!r}, num_canaries="
            f"{self.num_canaries}, num_included=<secret>)")


def _inclusion_bits(num_canaries, rng):
  """Each canary in with probability exactly 1/2, independently."""
  return rng.integers(0, 2, num_canaries).astype(bool)


def _num_classes(num_classes, y):
  if num_classes is None:
    return int(np.max(y)) + 1
  return checks.check_positive_int("num_classes", num_classes)


def _class_labels(y, name):
  labels = np.asarray(y)
  if labels.ndim == 2 and labels.shape[1] == 1:
    labels = labels[:, 0]
  if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
    raise ValueError(f"{name} must be integer class indices, one per "
                     f"example ([n] or [n, 1]); got {labels.dtype} of shape "
                     f"{labels.shape}. One-hot labels: pass y.argmax(-1).")
  return labels


def mislabeled_canaries(x: Any, y: Any, num_canaries: int, *,
                        num_classes: Optional[int] = None,
                        seed: Optional[int] = None) -> Canaries:
  """``num_canaries`` examples of ``(x, y)``, each with a wrong label.

  Args:
    x: the pool's inputs: examples the run does not otherwise train on
      (a held-out split), ``[n, ...]``.
    y: the pool's class indices, ``[n]``.
    num_canaries: m, at most n.
    num_classes: the number of classes; None: ``max(y) + 1``.
    seed: None (OS entropy) or an int: the choice of examples, their new
      labels and the inclusion bits.

  Returns:
    ``Canaries`` of kind ``"mislabeled"``: the chosen inputs, each
    relabelled uniformly among the other classes.
  """
  x = np.asarray(x)
  labels = _class_labels(y, "y")
  m = checks.check_positive_int("num_canaries", num_canaries)
  if m > len(x) or len(x) != len(labels):
    raise ValueError(f"num_canaries must be at most the pool's {len(x)} "
                     f"examples (x and y of one length; got {len(labels)} "
                     f"labels); got {m}.")
  classes = _num_classes(num_classes, labels)
  if classes < 2:
    raise ValueError(f"num_classes must be at least 2 for a wrong label to "
                     f"exist; got {classes}.")
  rng = np.random.default_rng(seed)
  chosen = rng.choice(len(x), m, replace=False)
  shift = rng.integers(1, classes, m)  # Any other class, uniformly.
  wrong = ((labels[chosen] + shift) % classes).astype(labels.dtype)
  return Canaries(CanaryKind.MISLABELED, _inclusion_bits(m, rng),
                  x=x[chosen], y=wrong)


def out_of_distribution_canaries(x: Any, num_canaries: int, *,
                                 num_classes: int,
                                 seed: Optional[int] = None) -> Canaries:
  """``num_canaries`` inputs of uniform noise, with random labels.

  Args:
    x: examples of the data's inputs: the canaries take their shape,
      dtype and range ``[min(x), max(x)]``.
    num_canaries: m.
    num_classes: labels are drawn uniformly from ``range(num_classes)``.
    seed: None (OS entropy) or an int.

  Returns:
    ``Canaries`` of kind ``"out_of_distribution"``.
  """
  x = np.asarray(x)
  m = checks.check_positive_int("num_canaries", num_canaries)
  classes = checks.check_positive_int("num_classes", num_classes)
  if x.ndim < 1 or not len(x) or not np.issubdtype(x.dtype, np.number):
    raise ValueError(f"x must hold examples of numeric inputs ([n, ...]); "
                     f"got {x.dtype} of shape {x.shape}.")
  rng = np.random.default_rng(seed)
  low, high = float(np.min(x)), float(np.max(x))
  noise = rng.uniform(low, high, (m,) + x.shape[1:])
  if np.issubdtype(x.dtype, np.integer):
    noise = np.rint(noise)
  return Canaries(CanaryKind.OUT_OF_DISTRIBUTION, _inclusion_bits(m, rng),
                  x=noise.astype(x.dtype), y=rng.integers(0, classes, m))


def dirac_canaries(num_canaries: int, *, gradient_norm: float = 1000.0,
                   seed: Optional[int] = None) -> Canaries:
  """``num_canaries`` gradient-space canaries for white-box audits.

  Args:
    num_canaries: m.
    gradient_norm: the norm of each canary's gradient before clipping;
      above the clipping norm, a correct DP step clips it to exactly that
      norm (a step that does not clip lets it through, and the audit sees
      it).
    seed: None (OS entropy) or an int: the inclusion bits.

  Returns:
    ``Canaries`` of kind ``"dirac"``; train them with
    ``tf_dp.keras.with_dirac_canaries``.
  """
  m = checks.check_positive_int("num_canaries", num_canaries)
  norm = checks.check_positive("gradient_norm", gradient_norm)
  rng = np.random.default_rng(seed)
  return Canaries(CanaryKind.DIRAC, _inclusion_bits(m, rng),
                  gradient_norm=norm)


@dataclasses.dataclass(frozen=True, eq=False)
class MixedData:
  """Training data holding the included canaries.

  Attributes:
    x: the inputs to train on; for Dirac canaries a pair ``(inputs,
      canary_ids)`` (0 for the data's rows, ``i + 1`` for canary ``i``).
    y: the labels.
    population_size: the records trained on: examples (or users) plus
      included canaries. Give it to ``DPOptimizer(population_size=...)``.
    user_ids: one user id per row (each canary a user of its own), when
      ``mix_canaries`` was given user ids; else None.
  """
  x: Any
  y: Any
  population_size: int
  user_ids: Optional[np.ndarray] = None


def _canary_rows(x, y, canaries):
  """``(x rows, y rows, ids)`` of the included canaries, in the data's
  dtypes and shapes."""
  picked = np.flatnonzero(canaries.included)
  if canaries.kind is CanaryKind.DIRAC:
    rows_x = np.zeros((picked.size,) + x.shape[1:], x.dtype)
    rows_y = np.zeros((picked.size,) + y.shape[1:], y.dtype)
    return rows_x, rows_y, (picked + 1).astype(np.int32)
  assert canaries.x is not None and canaries.y is not None
  if canaries.x.shape[1:] != x.shape[1:]:
    raise ValueError(f"The canaries' inputs have shape "
                     f"{canaries.x.shape[1:]} but the data's {x.shape[1:]}: "
                     f"make the canaries from examples like the data's.")
  rows_y = canaries.y[picked].reshape((picked.size,) + y.shape[1:])
  return (canaries.x[picked].astype(x.dtype), rows_y.astype(y.dtype),
          None)


def _canary_users(user_ids, count):
  """Fresh user ids for ``count`` canaries, one each."""
  ids = np.asarray(user_ids)
  if np.issubdtype(ids.dtype, np.number):
    start = int(np.max(ids)) + 1 if ids.size else 0
    return np.arange(start, start + count).astype(ids.dtype)
  fresh = np.array([f"tf_dp-canary-{i}" for i in range(count)])
  if np.isin(fresh, ids.astype(str)).any():
    raise ValueError("user_ids already holds ids of the form "
                     "'tf_dp-canary-<i>': rename those users.")
  return fresh  # Concatenated with ids, in a string type wide enough.


def mix_canaries(x: Any, y: Any, canaries: Canaries, *,
                 user_ids: Any = None) -> MixedData:
  """The arrays ``(x, y)`` with the included canaries appended.

  Privacy contract: the result holds the included canaries and no trace
  of the excluded ones; its ``population_size`` counts the included
  canaries (as examples, or as users of one example each), so the ledger
  of a run on it states the ε of that run.

  Args:
    x: the training inputs (one array, ``[n, ...]``).
    y: the training labels (``[n, ...]``).
    canaries: from ``mislabeled_canaries``, ``out_of_distribution_canaries``
      or ``dirac_canaries``.
    user_ids: one user id per example for user-level training
      (``tf_dp.data.poisson_sampled_users``): each canary becomes a user of
      its own, and ``population_size`` counts users.

  Returns:
    ``MixedData``.
  """
  if not isinstance(canaries, Canaries):
    raise TypeError(f"canaries must be tf_dp.data.Canaries (from "
                    f"tf_dp.data.mislabeled_canaries and the like); got "
                    f"{type(canaries).__name__}.")
  x, y = np.asarray(x), np.asarray(y)
  if x.ndim < 1 or len(x) != len(y):
    raise ValueError(f"x and y must be arrays of one example per row and "
                     f"of one length; got shapes {x.shape} and {y.shape}.")
  rows_x, rows_y, ids = _canary_rows(x, y, canaries)
  mixed_x: Any = np.concatenate([x, rows_x])
  if ids is not None:
    mixed_x = (mixed_x, np.concatenate([np.zeros(len(x), np.int32), ids]))
  mixed_y = np.concatenate([y, rows_y])
  if user_ids is None:
    return MixedData(mixed_x, mixed_y, len(x) + len(rows_x))
  users = np.asarray(user_ids)
  if users.shape != (len(x),):
    raise ValueError(f"user_ids must hold one id per example ({len(x)}); "
                     f"got shape {users.shape}.")
  mixed_users = np.concatenate([users, _canary_users(users, len(rows_x))])
  return MixedData(mixed_x, mixed_y,
                   len(np.unique(users)) + len(rows_x), mixed_users)


def mix_canaries_into_dataset(dataset: tf.data.Dataset, canaries: Canaries,
                              *, num_examples: Optional[int] = None
                              ) -> MixedData:
  """A dataset of ``(x, y)`` examples with the included canaries after it.

  Shuffle the result over all its elements before batching
  (``.shuffle(population_size)``), or train it as a sampler's lots.

  Args:
    dataset: unbatched ``(x, y)`` elements, one per example.
    canaries: as for ``mix_canaries``.
    num_examples: the dataset's number of elements, if TensorFlow cannot
      tell (``dataset.cardinality()`` unknown).

  Returns:
    ``MixedData`` whose ``x`` is the mixed dataset (``y`` None); for Dirac
    canaries its elements are ``((x, canary_id), y)``.
  """
  spec = dataset.element_spec
  if not (isinstance(spec, tuple) and len(spec) == 2
          and all(isinstance(s, tf.TensorSpec) for s in spec)):
    raise ValueError(f"dataset must have (x, y) elements of one tensor each, "
                     f"one example per element (unbatched); got {spec}.")
  count = int(dataset.cardinality())
  if count < 0:
    if num_examples is None:
      raise ValueError("dataset's number of examples is unknown to "
                       "TensorFlow: pass num_examples=<n> (the canaries "
                       "count in the population beside them).")
    count = checks.check_positive_int("num_examples", num_examples)
  like_x = np.zeros([0] + spec[0].shape.as_list(), spec[0].dtype.as_numpy_dtype)
  like_y = np.zeros([0] + spec[1].shape.as_list(), spec[1].dtype.as_numpy_dtype)
  rows_x, rows_y, ids = _canary_rows(like_x, like_y, canaries)
  if ids is None:
    extra = tf.data.Dataset.from_tensor_slices((rows_x, rows_y))
  else:
    extra = tf.data.Dataset.from_tensor_slices(((rows_x, ids), rows_y))
    dataset = dataset.map(lambda x, y: ((x, tf.constant(0, tf.int32)), y))
  return MixedData(dataset.concatenate(extra), None, count + len(rows_x))
