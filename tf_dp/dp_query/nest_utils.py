"""Partial-structure helpers on top of the public ``tf.nest`` API.

``flatten_up_to(shallow, deep)`` flattens ``deep`` only as far as the
structure of ``shallow`` goes (its leaves may be whole sub-structures of
``deep``), in ``tf.nest`` order (dict keys sorted). Mismatches raise a
``ValueError`` that says where.
"""

from typing import Any, Callable, List

import tensorflow as tf

from tf_dp.dp_query.dp_query import Nest


def _children(structure):
  if isinstance(structure, dict):
    return [structure[k] for k in sorted(structure)]
  return list(structure)


def flatten_up_to(shallow: Nest, deep: Nest, path: str = "record") -> List[Any]:
  """Flattens ``deep`` to the depth of ``shallow``."""
  if not tf.nest.is_nested(shallow):
    return [deep]
  if not tf.nest.is_nested(deep):
    raise ValueError(f"{path}: expected a structure like {type(shallow).__name__}"
                     f" with {len(_children(shallow))} entries; got {deep!r}.")
  if isinstance(shallow, dict):
    if not isinstance(deep, dict) or sorted(shallow) != sorted(deep):
      keys = sorted(deep) if isinstance(deep, dict) else type(deep).__name__
      raise ValueError(f"{path}: expected keys {sorted(shallow)}; got {keys}.")
    keys = sorted(shallow)
    return [x for k in keys for x in flatten_up_to(shallow[k], deep[k],
                                                   f"{path}[{k!r}]")]
  if isinstance(deep, dict) or len(_children(deep)) != len(_children(shallow)):
    raise ValueError(f"{path}: expected {len(_children(shallow))} entries; "
                     f"got {deep!r}.")
  return [x for i, (s, d) in enumerate(zip(_children(shallow),
                                            _children(deep)))
          for x in flatten_up_to(s, d, f"{path}[{i}]")]


def map_structure_up_to(shallow: Nest, fn: Callable[..., Any],
                        *structures: Nest) -> Nest:
  """Applies ``fn`` to matching sub-structures, to the depth of ``shallow``."""
  flat = [flatten_up_to(shallow, s) for s in structures]
  return tf.nest.pack_sequence_as(
      shallow, [fn(*args) for args in zip(*flat)])
