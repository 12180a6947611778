"""TF Privacy's ``quantile_estimator_query``: tf_dp's quantile estimators.

Same arguments in the same order; as in TF Privacy the update is
arithmetic unless ``geometric_update=True``. ``TreeQuantileEstimatorQuery``
(tree-aggregated noise) has no tf_dp equivalent.
"""

from tf_dp.dp_query import quantile_estimator_query


class QuantileEstimatorQuery(quantile_estimator_query.QuantileEstimatorQuery):
  """``tf_dp.QuantileEstimatorQuery`` with TF Privacy's arguments.

  Privacy contract: that of ``tf_dp.QuantileEstimatorQuery``.
  """

  def __init__(self, initial_estimate, target_quantile, learning_rate,
               below_estimate_stddev, expected_num_records,
               geometric_update=False):
    super().__init__(initial_estimate, target_quantile, learning_rate,
                     below_estimate_stddev, expected_num_records,
                     geometric_update=geometric_update)


class NoPrivacyQuantileEstimatorQuery(
    quantile_estimator_query.NoPrivacyQuantileEstimatorQuery):
  """``tf_dp.NoPrivacyQuantileEstimatorQuery`` with TF Privacy's arguments
  (epsilon = inf if recorded in a ledger)."""

  def __init__(self, initial_estimate, target_quantile, learning_rate,
               geometric_update=False):
    super().__init__(initial_estimate, target_quantile, learning_rate,
                     geometric_update=geometric_update)
