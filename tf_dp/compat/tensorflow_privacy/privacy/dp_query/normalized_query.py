"""TF Privacy's ``normalized_query`` module: tf_dp's ``NormalizedQuery``.

Same arguments, ``NormalizedQuery(numerator_query, denominator)``; the
denominator must be a number > 0 (the expected number of records per
sample; TF Privacy also accepted a tensor or None).
"""

from tf_dp.dp_query.normalized_query import NormalizedQuery  # pylint: disable=unused-import
