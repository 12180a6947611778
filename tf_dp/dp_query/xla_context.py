"""Whether the ops being built will be compiled by XLA.

Some choices depend on it: a kernel XLA lacks (``EuclideanNorm``) is
replaced by ops it has, and secure noise, drawn on the host, is refused
under XLA. Mechanisms and the front ends above them ask here.
"""

import tensorflow as tf


def in_xla_context() -> bool:
  """True while ops are built inside an XLA cluster (a
  ``tf.function(jit_compile=True)``, or a model compiled with
  ``jit_compile=True``); False eagerly, in an ordinary ``tf.function``, and
  on a TensorFlow without the lookup (``tf.__internal__`` does not promise
  it)."""
  enclosing = getattr(tf.__internal__, "get_enclosing_xla_context", None)
  return enclosing is not None and enclosing() is not None
