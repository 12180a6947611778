"""What a ``fit`` (or ``train_on_batch``) call was given, read as Keras
reads it: its arguments by name and how many examples it trains on."""

import math
from typing import Any, Dict, Optional, Sequence
import inspect

import tensorflow as tf


def keras_arguments(model: Any, method: str, args: Sequence[Any],
                    kwargs: Dict[str, Any]) -> Dict[str, Any]:
  """The arguments of a ``model.<method>(*args, **kwargs)`` call by name,
  as Keras's own ``method`` reads them (a subclass may override it with
  ``*args, **kwargs``); {} if they do not bind (Keras then raises)."""
  keras_method = getattr(type(model), method)
  for cls in type(model).__mro__:
    if method in vars(cls) and cls.__module__.startswith(("keras", "tf_keras")):
      keras_method = vars(cls)[method]
      break
  try:
    return inspect.signature(keras_method).bind_partial(
        model, *args, **kwargs).arguments
  except TypeError:
    return {}


def training_examples(bound: Dict[str, Any]) -> Optional[int]:
  """How many examples a ``fit`` call trains on, or None.

  Known for arrays and tensors (and nests of them): their length, less the
  part ``validation_split`` holds out (Keras trains on the first
  ``floor(n * (1 - validation_split))``). None for datasets, generators and
  anything else of unknown length.

  Args:
    bound: ``fit``'s arguments by name (``keras_arguments``).
  """
  x = bound.get("x")
  leaves = tf.nest.flatten(x) if x is not None else []
  if not leaves or isinstance(leaves[0], tf.data.Dataset):
    return None
  shape = getattr(leaves[0], "shape", None)
  if shape is None or len(shape) == 0 or shape[0] is None:
    return None
  n = int(shape[0])
  split = bound.get("validation_split") or 0.0
  if split and bound.get("validation_data") is None:
    n = int(math.floor(n * (1.0 - split)))
  return n if n >= 1 else None


def expected_lot_examples(bound: Dict[str, Any], examples: Optional[int],
                          batches_per_lot: int) -> Optional[int]:
  """The most examples a lot of ``fit``'s arrays holds (``batches_per_lot``
  batches of ``batch_size``, Keras's default 32, within one pass over the
  ``examples``), or None when the input is not arrays."""
  if examples is None:
    return None
  return min(examples, (bound.get("batch_size") or 32) * batches_per_lot)
