"""``tf_dp.dp_query.xla_context.in_xla_context``: True exactly while ops
are built for XLA, as the choices that depend on it (``EuclideanNorm``'s
replacement, secure noise's refusal) assume."""

import tensorflow as tf

from tf_dp.dp_query import xla_context


def _traced(jit_compile):
  """What ``in_xla_context`` answered while ``tf.function`` traced."""
  seen = []

  def body():
    seen.append(xla_context.in_xla_context())
    return tf.constant(0.0)

  tf.function(body, jit_compile=jit_compile)()
  return seen


def test_false_eagerly_and_in_an_ordinary_function():
  assert xla_context.in_xla_context() is False
  assert _traced(jit_compile=False) == [False]


def test_true_while_a_jit_compiled_function_is_traced():
  assert _traced(jit_compile=True) == [True]


def test_true_inside_a_while_loop_of_a_jit_compiled_function():
  """Nested control flow keeps the enclosing XLA context (the fast
  clipped sum's norms may be built inside a loop body)."""
  seen = []

  def body(i):
    seen.append(xla_context.in_xla_context())
    return (i + 1,)

  tf.function(lambda: tf.while_loop(lambda i: i < 2, body, [0]),
              jit_compile=True)()
  assert seen and all(seen)
