"""A few examples of what ``fit`` will train on, read before it trains.

``make_private``'s ``fit`` needs them to build a model that is not built yet
and for the privacy self-check. Every kind of input ``fit`` accepts is read
without consuming it: arrays and tensors are sliced, a ``tf.data.Dataset``
is iterated anew (a sampler's dataset draws fresh lots each time), and a
generator's first batch is put back in front of it.
"""

import collections.abc
import math
import types

import tensorflow as tf

from tf_dp.data import lots as data_lots
from tf_dp.errors import PrivacyError
from tf_dp.keras import dp_step
from tf_dp.keras import per_example


class _NoBatch(Exception):
  """The first batch of a ``fit`` input cannot be read (the reason)."""


def fit_input(args, kwargs):
  """``fit``'s ``x`` and ``y`` as Keras reads them (positional or named)."""
  return (kwargs.get("x", args[0] if args else None),
          kwargs.get("y", args[1] if len(args) > 1 else None))


def with_fit_input(args, kwargs, x):
  """``fit``'s arguments with ``x`` replaced."""
  if "x" in kwargs or not args:
    return args, dict(kwargs, x=x)
  return (x,) + tuple(args[1:]), kwargs


def peek(model, args, kwargs):
  """``(batch, args, kwargs)``: a few examples of what ``fit`` will train on
  as ``(x, y, sample_weight)`` (None if the input holds no batch), and
  ``fit``'s arguments to train on (a generator's first batch, read here,
  is put back in front of it).

  Reads every kind of input ``fit`` accepts: arrays and tensors (and nests
  of them), a ``tf.data.Dataset``, a Python generator or iterator, and a
  ``keras.utils.PyDataset`` (Keras 3) or ``keras.utils.Sequence`` (Keras 2).

  Raises:
    _NoBatch: for any other input, with the reason.
  """
  keras_backend = dp_step.converted_backend(model)
  x, y = fit_input(args, kwargs)
  if isinstance(x, tf.data.Dataset):
    return _weighted_rows_of_dataset(
        keras_backend, x, _lots_for_evidence(model, x)), args, kwargs
  if isinstance(x, (types.GeneratorType, collections.abc.Iterator)):
    try:
      batch = next(x)
    except StopIteration:
      return None, args, kwargs
    args, kwargs = with_fit_input(args, kwargs, _prepended(batch, x))
    return _unpacked_head(keras_backend, batch), args, kwargs
  if (hasattr(x, "__getitem__") and hasattr(x, "__len__")
      and not hasattr(x, "shape")
      and not isinstance(x, (list, tuple, dict))):
    if len(x) == 0:  # pylint: disable=g-explicit-length-test
      return None, args, kwargs
    return _unpacked_head(keras_backend, x[0]), args, kwargs
  if x is not None and all(hasattr(t, "shape") for t in tf.nest.flatten(x)):
    return (tf.nest.map_structure(_head, x),
            None if y is None else tf.nest.map_structure(_head, y),
            _head(kwargs.get("sample_weight"))), args, kwargs
  raise _NoBatch(f"fit was given a {type(x).__name__}, from which tf_dp "
                 f"cannot read a first batch without consuming it")


# A marked dataset's lots are read until all of them being empty has
# probability exp(-q n lots) below this (q n: a lot's expected records).
_EMPTY_LOTS_ODDS = 1e-9


def _lots_for_evidence(model, dataset):
  """How many batches of ``dataset``'s fresh lots must all hold no example
  of positive weight before that says the dataset holds none: batches of
  ``ceil(ln(1 / _EMPTY_LOTS_ODDS) / (q n))`` Poisson lots. None for a
  dataset that declares no Poisson lots, or of unknown n."""
  declared = data_lots.declared_sampling(dataset)
  if declared is None or declared.sampling_probability is None:
    return None
  n = declared.population_size
  engine = getattr(getattr(model, "optimizer", None), "dp_engine", None)
  if n is None and engine is not None:
    n = engine.recorded_population_size()
  if not n:
    return None
  expected = declared.sampling_probability * n
  return declared.batches_per_lot * math.ceil(
      math.log(1 / _EMPTY_LOTS_ODDS) / expected)


def _weighted_rows_of_dataset(keras_backend, dataset, lots_for_evidence=None,
                              rows=8, batches=16, most_batches=256):
  """At least ``rows`` distinct examples of positive weight (all a batch
  holds without weights) from the first batches of ``dataset`` (at most
  ``batches``, once 2 are found), as ``(x, y, sample_weight)``; None for
  an empty dataset.

  A Poisson lot is padded with rows of weight 0 (zeros): a check on a
  small first lot's padding compares examples that are equal and whose
  gradients are zero whatever the model does, and proves nothing. So does
  a check on one example read twice (the check's neighbour replaces an
  example by another of the rows read): a row whose inputs equal those of
  a row read before is no new example. A marked dataset
  (``tf_dp.data.declared_sampling``) draws fresh lots each time it is
  iterated, so reading lots here changes none of those ``fit`` trains on,
  and lots that drew fewer than 2 examples say nothing about them: such a
  dataset is read pass after pass (up to ``most_batches`` batches in all)
  until 2 examples are found, or until ``lots_for_evidence`` batches of
  lots held none at all (all empty, by chance, with probability below
  ``_EMPTY_LOTS_ODDS``: the dataset holds no example of positive weight,
  and its lots release noise only). An unmarked dataset is read once.

  Raises:
    _NoBatch: if those batches hold fewer than 2 such examples (unless the
      whole dataset is batches of one row, which cannot mix examples, or
      holds no example of positive weight).
  """
  fresh = data_lots.declared_sampling(dataset) is not None
  found = _ExamplesRead()
  for batch in (dataset.repeat().take(most_batches) if fresh
                else dataset.take(batches)):
    batch = keras_backend.unpack_x_y_sample_weight(batch)
    if batch[2] is None:
      return batch  # Without weights, every row is an example.
    found.add(batch)
    if found.count >= rows or (found.count >= 2 and found.batches >= batches):
      return found.joined()
    if (fresh and found.count == 0 and lots_for_evidence is not None
        and found.batches >= lots_for_evidence):
      return found.first  # The dataset holds no example of positive weight.
  # Every batch that may be read is read.
  if found.count >= 2:
    return found.joined()
  if found.first is None:
    return None  # An empty dataset.
  # Fewer than 2 examples. An unmarked dataset shorter than ``batches``
  # was read whole; a marked one as often as ``most_batches`` allows.
  unmarked_whole = not fresh and found.batches < batches
  if (fresh or unmarked_whole) and found.widest < 2:
    return found.first  # Batches of one row: none can mix examples.
  if unmarked_whole and found.count == 0:
    # No example of positive weight: every gradient is 0, the batches
    # release noise only.
    return found.first
  raise _NoBatch(f"its first {found.batches} batch(es) hold fewer than 2 "
                 f"distinct examples of positive weight")


class _ExamplesRead:
  """What the batches ``(x, y, sample_weight)`` read so far hold: the first
  batch, the most rows in one batch, and their distinct examples of
  positive weight (``_new_examples``)."""

  def __init__(self):
    self.first, self.batches, self.widest = None, 0, 0
    self._parts, self._seen = [], set()

  @property
  def count(self):
    """How many distinct examples of positive weight were read."""
    return len(self._seen)

  def add(self, batch):
    self.first = batch if self.first is None else self.first
    self.batches += 1
    self.widest = max(self.widest, int(per_example.batch_size(batch[0])))
    self._parts.append(_new_examples(batch, self._seen))

  def joined(self):
    """The examples read, as one ``(x, y, sample_weight)``."""
    return tuple(None if part is None else tf.nest.map_structure(
        lambda *ts: _concat_rows(ts), *part) for part in zip(*self._parts))


def _new_examples(batch, seen):
  """The rows of ``(x, y, sample_weight)`` whose weight is positive and
  whose inputs' key (``per_example.row_keys``) is not in ``seen``, the first of
  equal ones; their keys are added to ``seen``."""
  weight = tf.reshape(tf.cast(batch[2], tf.float32),
                      [per_example.batch_size(batch[2]), -1])[:, 0]
  positive = tf.where(weight > 0)[:, 0].numpy()
  keep = []
  for row, key in zip(positive, per_example.row_keys(batch[0], positive)):
    if key not in seen:
      seen.add(key)
      keep.append(row)
  keep = tf.constant(keep, tf.int64)

  def gather(t):
    if isinstance(t, tf.SparseTensor):
      return tf.sparse.from_dense(tf.gather(tf.sparse.to_dense(t), keep))
    return tf.gather(t, keep)

  return tuple(None if part is None else tf.nest.map_structure(gather, part)
               for part in batch)


def _concat_rows(parts):
  if isinstance(parts[0], tf.SparseTensor):
    return tf.sparse.concat(0, list(parts), expand_nonconcat_dims=True)
  return tf.concat(list(parts), 0)


def _prepended(first, rest):
  """A generator of ``first``, then of what ``rest`` yields (Keras takes
  generators, not other iterators)."""
  yield first
  yield from rest


def _unpacked_head(keras_backend, batch):
  """A few examples of one batch of a generator or a PyDataset."""
  x, y, sample_weight = keras_backend.unpack_x_y_sample_weight(
      tuple(batch) if isinstance(batch, list) else batch)
  head = lambda s: None if s is None else tf.nest.map_structure(_head, s)
  return head(x), head(y), head(sample_weight)


def _head(t, count=8):
  """The first ``count`` examples of ``t`` (dense, ragged or sparse)."""
  if t is None:
    return None
  if isinstance(t, tf.SparseTensor):
    size = tf.minimum(t.dense_shape[0], count)
    return tf.sparse.slice(t, tf.zeros_like(t.dense_shape), tf.concat(
        [[size], t.dense_shape[1:]], 0))
  return t[:count]


def for_fit(model, args, kwargs):
  """``peek``, when the model needs a batch (to be built, or
  for the self-check); an input it cannot read refuses ``fit`` when the
  self-check is to run, with the reason and the fixes."""
  needs_check = (model._tf_dp_self_check  # pylint: disable=protected-access
                 and not getattr(model, "_tf_dp_checked", False))
  if not needs_check and model.built and model.trainable_variables:
    return None, args, kwargs
  try:
    return peek(model, args, kwargs)
  except (_NoBatch, TypeError, ValueError, tf.errors.OpError) as e:
    if not needs_check:
      return None, args, kwargs
    raise PrivacyError(
        f"tf_dp's privacy self-check could not read the first batch of "
        f"fit's input ({e}), and fit does not train without it: a layer "
        f"that mixes examples would break the privacy guarantee unseen. "
        f"Give fit arrays, a tf.data.Dataset, a generator or a "
        f"keras.utils.PyDataset; or run tf_dp.keras.check_privacy(model, "
        f"x, y) on a batch yourself and convert the model with "
        f"make_private(model, self_check=False).") from e
