"""The first batch of what ``fit`` will train on, read before it trains.

``make_private``'s ``fit`` needs it to build a model that is not built yet
(the DP state is created before Keras traces the train step). Every kind of
input ``fit`` accepts is read without consuming it: arrays and tensors are
sliced, a ``tf.data.Dataset`` is iterated anew, and a generator's first
batch is put back in front of it. Nothing here decides privacy: the DP
step's privacy gate does, on the traced step (``tf_dp.keras.privacy_gate``).
"""

import collections.abc
import types
from typing import Any, Dict, Iterable, Iterator, Tuple, cast

import tensorflow as tf

from tf_dp.keras import dp_step


class _NoBatch(Exception):
  """The first batch of a ``fit`` input cannot be read (the reason)."""


def fit_input(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Tuple[Any, Any]:
  """``fit``'s ``x`` and ``y`` as Keras reads them (positional or named)."""
  return (kwargs.get("x", args[0] if args else None),
          kwargs.get("y", args[1] if len(args) > 1 else None))


def with_fit_input(args: Tuple[Any, ...], kwargs: Dict[str, Any],
                   x: Any) -> Tuple[Tuple[Any, ...], Dict[str, Any]]:
  """``fit``'s arguments with ``x`` replaced."""
  if "x" in kwargs or not args:
    return args, dict(kwargs, x=x)
  return (x,) + tuple(args[1:]), kwargs


def peek(model: Any, args: Tuple[Any, ...],
         kwargs: Dict[str, Any]) -> Tuple[Any, Tuple[Any, ...], Dict[str, Any]]:
  """``(x, args, kwargs)``: the inputs of the first batch ``fit`` will
  train on (None if the input holds no batch), and ``fit``'s arguments to
  train on (a generator's first batch, read here, is put back in front of
  it).

  Reads every kind of input ``fit`` accepts: arrays and tensors (and nests
  of them), a ``tf.data.Dataset``, a Python generator or iterator, and a
  ``keras.utils.PyDataset`` (Keras 3) or ``keras.utils.Sequence`` (Keras 2).

  Raises:
    _NoBatch: for any other input, with the reason.
  """
  # The fit of a converted model.
  keras_backend = cast(types.ModuleType, dp_step.converted_backend(model))
  x, _ = fit_input(args, kwargs)
  if isinstance(x, tf.data.Dataset):
    for batch in x.take(1):
      return keras_backend.unpack_x_y_sample_weight(batch)[0], args, kwargs
    return None, args, kwargs
  if isinstance(x, (types.GeneratorType, collections.abc.Iterator)):
    try:
      batch = next(x)
    except StopIteration:
      return None, args, kwargs
    args, kwargs = with_fit_input(args, kwargs, _prepended(batch, x))
    return _unpacked_inputs(keras_backend, batch), args, kwargs
  if (hasattr(x, "__getitem__") and hasattr(x, "__len__")
      and not hasattr(x, "shape")
      and not isinstance(x, (list, tuple, dict))):
    if len(x) == 0:  # pylint: disable=g-explicit-length-test
      return None, args, kwargs
    return _unpacked_inputs(keras_backend, x[0]), args, kwargs
  if x is not None and all(hasattr(t, "shape") for t in tf.nest.flatten(x)):
    return tf.nest.map_structure(_head, x), args, kwargs
  raise _NoBatch(f"fit was given a {type(x).__name__}, from which tf_dp "
                 f"cannot read a first batch without consuming it")


def _prepended(first: Any, rest: Iterable[Any]) -> Iterator[Any]:
  """A generator of ``first``, then of what ``rest`` yields (Keras takes
  generators, not other iterators)."""
  yield first
  yield from rest


def _unpacked_inputs(keras_backend: types.ModuleType, batch: Any) -> Any:
  """The inputs ``x`` of one batch of a generator or a PyDataset."""
  return keras_backend.unpack_x_y_sample_weight(
      tuple(batch) if isinstance(batch, list) else batch)[0]


def _head(t: Any, count: int = 8) -> Any:
  """The first ``count`` examples of ``t`` (dense, ragged or sparse)."""
  if t is None:
    return None
  if isinstance(t, tf.SparseTensor):
    size = tf.minimum(t.dense_shape[0], count)
    return tf.sparse.slice(t, tf.zeros_like(t.dense_shape), tf.concat(
        [[size], t.dense_shape[1:]], 0))
  return t[:count]


def for_fit(
    model: Any, args: Tuple[Any, ...],
    kwargs: Dict[str, Any]) -> Tuple[Any, Tuple[Any, ...], Dict[str, Any]]:
  """``peek`` when the model is not built yet (a Sequential without
  ``Input``, a subclassed model): ``(x, args, kwargs)``, with x None when
  the model is built or no first batch can be read (Keras then builds the
  model itself)."""
  if model.built and model.trainable_variables:
    return None, args, kwargs
  try:
    return peek(model, args, kwargs)
  except (_NoBatch, TypeError, ValueError, tf.errors.OpError):
    return None, args, kwargs
