"""Privacy mechanisms: ``DPQuery`` objects (McMahan & Andrew 2018, concern b)."""

from tf_dp.dp_query.allocation import build_query
from tf_dp.dp_query.allocation import effective_noise_multiplier
from tf_dp.dp_query.allocation import group_clips
from tf_dp.dp_query.allocation import group_stddevs
from tf_dp.dp_query.batch_norm_stats_query import BatchNormStatsQuery
from tf_dp.dp_query.correlated_noise_query import CorrelatedNoiseQuery
from tf_dp.dp_query.dp_query import DPQuery
from tf_dp.dp_query.dp_query import SumAggregationDPQuery
from tf_dp.dp_query.events import CorrelatedNoiseEvent
from tf_dp.dp_query.events import NoOpEvent
from tf_dp.dp_query.events import SumQueryEvent
from tf_dp.dp_query.gaussian_query import GaussianSumQuery
from tf_dp.dp_query.joint_clipping_query import JointClippingQuery
from tf_dp.dp_query.metrics_query import DPMetricsQuery
from tf_dp.dp_query.nested_query import NestedQuery
from tf_dp.dp_query.no_privacy_query import NoPrivacyAverageQuery
from tf_dp.dp_query.no_privacy_query import NoPrivacySumQuery
from tf_dp.dp_query.normalized_query import NormalizedQuery
from tf_dp.dp_query.quantile_adaptive_clip_query import QuantileAdaptiveClipSumQuery
from tf_dp.dp_query.quantile_estimator_query import NoPrivacyQuantileEstimatorQuery
from tf_dp.dp_query.quantile_estimator_query import QuantileEstimatorQuery
