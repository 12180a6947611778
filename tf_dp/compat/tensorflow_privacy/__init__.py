"""TensorFlow Privacy's public names, mapped onto tf_dp.

Replace ``import tensorflow_privacy`` by
``from tf_dp.compat import tensorflow_privacy`` (or the module paths under
``tf_dp.compat.tensorflow_privacy.privacy``). What TF Privacy did not ask
for (see ``docs/guides/migrating_from_tf_privacy.md``):

* the model is converted with ``tf_dp.keras.make_private(model)`` (done by
  ``tf.keras.Model.compile`` with a ``DPKeras*Optimizer``, and by
  ``DPSequential`` / ``DPModel``);
* the n of the accounting recorded in ``optimizer.ledger`` is taken from the
  arrays ``fit`` trains on; with a ``tf.data`` pipeline or a custom loop
  the optimizer needs ``population_size=len(x_train)``.

Like ``tf_dp`` itself, this package imports nothing (TensorFlow included)
until a name is used; the accounting names work without TensorFlow.
Importing a TF Privacy module that it does not map raises an
``ImportError`` naming what to use instead (``_unmapped``).
"""

from tf_dp import _lazy_names
from tf_dp.compat.tensorflow_privacy import _unmapped

_unmapped.install()

_PRIVACY = "tf_dp.compat.tensorflow_privacy.privacy"
_ANALYSIS = _PRIVACY + ".analysis.compute_dp_sgd_privacy_lib"
_QUERY = _PRIVACY + ".dp_query"
_OPTIMIZERS = _PRIVACY + ".optimizers.dp_optimizer_keras"
_VECTORIZED = _PRIVACY + ".optimizers.dp_optimizer_keras_vectorized"
_MODELS = _PRIVACY + ".keras_models.dp_keras_model"

# Public name -> module that defines it (TF Privacy's top-level names that
# tf_dp has an equivalent for; docs/guides/migrating_from_tf_privacy.md lists
# those left out).
_LAZY_NAMES = {
    "compute_dp_sgd_privacy": _ANALYSIS,
    "compute_dp_sgd_privacy_statement": _ANALYSIS,
    "DPQuery": _QUERY + ".dp_query",
    "SumAggregationDPQuery": _QUERY + ".dp_query",
    "GaussianSumQuery": _QUERY + ".gaussian_query",
    "NestedQuery": _QUERY + ".nested_query",
    "NoPrivacyAverageQuery": _QUERY + ".no_privacy_query",
    "NoPrivacySumQuery": _QUERY + ".no_privacy_query",
    "NormalizedQuery": _QUERY + ".normalized_query",
    "QuantileAdaptiveClipSumQuery": _QUERY + ".quantile_adaptive_clip_sum_query",
    "QuantileEstimatorQuery": _QUERY + ".quantile_estimator_query",
    "NoPrivacyQuantileEstimatorQuery": _QUERY + ".quantile_estimator_query",
    "TreeQuantileEstimatorQuery": _QUERY + ".quantile_estimator_query",
    "DPModel": _MODELS,
    "DPSequential": _MODELS,
    "DPKerasAdagradOptimizer": _OPTIMIZERS,
    "DPKerasAdamOptimizer": _OPTIMIZERS,
    "DPKerasSGDOptimizer": _OPTIMIZERS,
    "make_keras_optimizer_class": _OPTIMIZERS,
    "VectorizedDPKerasAdagradOptimizer": _VECTORIZED,
    "VectorizedDPKerasAdamOptimizer": _VECTORIZED,
    "VectorizedDPKerasSGDOptimizer": _VECTORIZED,
    "make_vectorized_keras_optimizer_class": _VECTORIZED,
    "privacy": _PRIVACY,
}


__getattr__, __dir__ = _lazy_names(
    __name__, _LAZY_NAMES, ": tf_dp has no equivalent of it (see the "
    "migration table, docs/guides/migrating_from_tf_privacy.md).")
