"""TF Privacy's ``nested_query`` module: tf_dp's ``NestedQuery``.

``NestedSumQuery`` (TF Privacy's nested query of sum queries) is the same
class: tf_dp's ``NestedQuery`` composes any queries over a ``tf.nest``
structure, and its event is the tuple of the sub-queries' events.
"""

from tf_dp.dp_query.nested_query import NestedQuery

NestedSumQuery = NestedQuery
