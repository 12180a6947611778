"""TF Privacy's ``quantile_estimator_query``: tf_dp's quantile estimators.

Same arguments in the same order; as in TF Privacy the update is
arithmetic unless ``geometric_update=True``. ``TreeQuantileEstimatorQuery``
maps onto tf_dp's estimator with independent noise per sample (it warns;
see its docstring).
"""

import warnings

from tf_dp.dp_query import quantile_estimator_query

TREE_NOISE_WARNING = (
    "TreeQuantileEstimatorQuery: tf_dp adds independent Gaussian noise of "
    "stddev below_estimate_stddev to each sample's below-estimate count, "
    "recorded in the privacy ledger with the lot's sampling and composed "
    "over steps. TF Privacy correlated that noise across steps by tree "
    "aggregation (Kairouz et al. 2021), which its ledger did not account "
    "for. Each step then costs what TF Privacy's QuantileEstimatorQuery "
    "costs, and the estimate is noisier than with tree aggregation; a "
    "smaller learning_rate smooths it.")


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


class TreeQuantileEstimatorQuery(QuantileEstimatorQuery):
  """TF Privacy's tree-aggregated estimator, mapped onto
  ``tf_dp.QuantileEstimatorQuery`` (same arguments; warns).

  Privacy contract: that of ``tf_dp.QuantileEstimatorQuery``: each sample's
  below-estimate count (each record contributes a bit, sensitivity 0.5
  after centring) gets fresh N(0, below_estimate_stddev^2) noise, recorded
  as one Gaussian sum query of the sample in the ledger. There is no
  tree-aggregated (cross-step correlated) noise.
  """

  def __init__(self, initial_estimate, target_quantile, learning_rate,
               below_estimate_stddev, expected_num_records,
               geometric_update=False):
    warnings.warn(TREE_NOISE_WARNING, UserWarning, stacklevel=2)
    super().__init__(initial_estimate, target_quantile, learning_rate,
                     below_estimate_stddev, expected_num_records,
                     geometric_update=geometric_update)
