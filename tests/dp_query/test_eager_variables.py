"""``tf_dp.dp_query.eager_variables``: state created on first use inside a
``tf.function``'s trace is created eagerly and is no variable of that
function, which then runs the one trace it made."""

import pytest
import tensorflow as tf

from tf_dp.dp_query import eager_variables


def _counter_function(scope):
  """A function that creates its counter, under ``scope``, on first use."""
  created = []

  def body():
    if not created:
      with scope():
        created.append(tf.Variable(0, name="counter"))
    return created[0].assign_add(1)

  return tf.function(body), created


@pytest.mark.parametrize("scope, traces", [
    (eager_variables.creation_scope, 1),
    # Plain tf.init_scope: the trace records the variable and runs again.
    (tf.init_scope, 2)])
def test_state_created_in_a_trace_is_not_the_functions(scope, traces):
  fn, created = _counter_function(scope)
  assert [int(fn()) for _ in range(3)] == [1, 2, 3]
  assert fn.experimental_get_tracing_count() == traces
  assert len(created) == 1  # Created once, read by every call.

