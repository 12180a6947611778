"""``TreeQuantileEstimatorQuery`` of ``tf_dp.compat.tensorflow_privacy``.

It maps onto the estimator with independent noise per sample and warns.
TF Privacy's own quantile estimator tests (its inputs and expected
estimates, exact, private and tree) run as released in
``test_tf_privacy_suite.py``.
"""

import pytest
import tensorflow as tf

from tf_dp.compat import tensorflow_privacy as tfp
from tf_dp.compat.tensorflow_privacy.privacy.dp_query import quantile_estimator_query as qe


def test_tree_estimator_records_one_gaussian_query_per_sample():
  """What the ledger accounts: sensitivity 0.5, the given stddev."""
  with pytest.warns(UserWarning, match="independent Gaussian noise"):
    query = tfp.TreeQuantileEstimatorQuery(1.0, 0.5, 0.1, 3.0, 10.0)
  state = query.initial_global_state()
  sample = query.initial_sample_state(tf.constant(0.0))
  sample = query.accumulate_record(query.derive_sample_params(state), sample,
                                   tf.constant(2.0))
  _, _, event = query.get_noised_result(sample, state)
  assert (float(event.l2_norm_clip), float(event.noise_stddev)) == (0.5, 3.0)


def test_top_level_names():
  assert tfp.TreeQuantileEstimatorQuery is qe.TreeQuantileEstimatorQuery
  assert tfp.QuantileEstimatorQuery is qe.QuantileEstimatorQuery
  assert tfp.NoPrivacyQuantileEstimatorQuery is (
      qe.NoPrivacyQuantileEstimatorQuery)
  with pytest.raises(AttributeError, match="migrating_from_tf_privacy.md"):
    getattr(tfp, "TreeAggregationQuery")
