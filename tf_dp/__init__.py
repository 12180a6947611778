"""tf_dp: differentially private training for TensorFlow and Keras.

Importing ``tf_dp`` is cheap and never imports TensorFlow: public names are
resolved lazily on first use, so ``tf_dp.analysis`` works without TensorFlow
and optional parts (Estimator, Keras 2 vs. Keras 3 glue) are imported only
when used.

Three layers, three sub-packages (McMahan & Andrew 2018):
  * ``tf_dp.analysis``: privacy accounting (pure Python, no TensorFlow);
  * ``tf_dp.dp_query`` and ``tf_dp.privacy_ledger``: privacy mechanisms and
    the ledger of what they did;
  * ``tf_dp.keras`` and ``tf_dp.estimator``: training glue.
Paper reproductions (DP dropout, DP-PCA, audits) are in
``tf_dp.reproductions``.
"""

import importlib
import sys

__version__ = "0.1.0"

# Public name -> module that defines it.
_LAZY_NAMES = {
    "analysis": "tf_dp.analysis",
    "compat": "tf_dp.compat",
    "keras": "tf_dp.keras",
    "data": "tf_dp.data",
    "reproductions": "tf_dp.reproductions",
    "PrivacyBudget": "tf_dp.keras.callbacks",
    "DPOptimizer": "tf_dp.keras.optimizer",
    "make_private": "tf_dp.keras.private_model",
    "BatchNormStatsQuery": "tf_dp.dp_query",
    "DPMetricsQuery": "tf_dp.dp_query",
    "DPQuery": "tf_dp.dp_query",
    "GaussianSumQuery": "tf_dp.dp_query",
    "JointClippingQuery": "tf_dp.dp_query",
    "NestedQuery": "tf_dp.dp_query",
    "NoPrivacyAverageQuery": "tf_dp.dp_query",
    "NoPrivacySumQuery": "tf_dp.dp_query",
    "NormalizedQuery": "tf_dp.dp_query",
    "QuantileAdaptiveClipSumQuery": "tf_dp.dp_query",
    "QuantileEstimatorQuery": "tf_dp.dp_query",
    "NoPrivacyQuantileEstimatorQuery": "tf_dp.dp_query",
    "SumAggregationDPQuery": "tf_dp.dp_query",
    "SumQueryEvent": "tf_dp.dp_query",
    "NoOpEvent": "tf_dp.dp_query",
    "build_query": "tf_dp.dp_query",
    "effective_noise_multiplier": "tf_dp.analysis",
    "dp_query": "tf_dp.dp_query",
    "PrivacyLedger": "tf_dp.privacy_ledger",
    "QueryWithLedger": "tf_dp.privacy_ledger",
    "privacy_ledger": "tf_dp.privacy_ledger",
}


def _lazy_names(package, names, missing=""):
  """``(__getattr__, __dir__)`` for ``package``: each name of ``names`` (a
  module's own name, or a name that module defines) is imported on first
  use; another name raises AttributeError, followed by ``missing``."""
  namespace = vars(sys.modules[package])

  def getattr_(name):
    module_name = names.get(name)
    if module_name is None:
      raise AttributeError(
          f"module {package!r} has no attribute {name!r}{missing}")
    module = importlib.import_module(module_name)
    value = module if module_name.endswith("." + name) else getattr(module, name)
    namespace[name] = value
    return value

  return getattr_, lambda: sorted(list(namespace) + list(names))


__getattr__, __dir__ = _lazy_names(__name__, _LAZY_NAMES)
