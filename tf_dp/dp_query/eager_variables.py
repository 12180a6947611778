"""State variables created eagerly, once, outside any ``tf.function``.

A mechanism's long-lived state (the per-process noise key, a DP
optimizer's lot and ledger variables) is created on first use, which may
be inside the trace of a ``tf.function``: the user's own, or ``fit``'s
train step. ``creation_scope`` creates it eagerly and keeps it out of that
function's variable capture, so the function runs the trace it made.
"""

import contextlib
from typing import Any, Callable, Iterator

import tensorflow as tf


def not_lifted(next_creator: Callable[..., Any], **kwargs: Any) -> Any:
  """Creates a variable that the enclosing ``tf.function`` does not capture.

  Under ``tf.init_scope`` a variable is created eagerly, but a
  ``tf.function`` whose trace is running still records it among the
  variables its trace created, and traces the function a second time before
  running it. State created eagerly, once, for every later trace needs none
  of the first trace's variable capture (which exists to lift initializers
  out of the graph).
  """
  kwargs["experimental_enable_variable_lifting"] = False
  return next_creator(**kwargs)


@contextlib.contextmanager
def creation_scope() -> Iterator[None]:
  """``tf.init_scope`` with ``not_lifted``: variables created inside are
  created eagerly (when the program runs eagerly outside every
  ``tf.function``; in a ``tf.compat.v1`` graph, in that graph) and are no
  variable of the ``tf.function`` being traced."""
  with tf.init_scope(), tf.variable_creator_scope(not_lifted):
    yield
