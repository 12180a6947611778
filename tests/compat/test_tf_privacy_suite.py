"""TF Privacy's own tests for the names ``tf_dp.compat`` exports, run against it.

Each file below is TF Privacy 0.9.0's test file, executed as released (its
inputs, expected numbers and assertions unchanged) with its
``tensorflow_privacy`` imports answered by ``tf_dp.compat.
tensorflow_privacy`` (``tests/compat/tf_privacy_tests.py``). The few tests
that check a behaviour tf_dp changes on purpose are expected to fail
(strict: one that starts passing fails the run), each with the row of the
migration table (docs/guides/migrating_from_tf_privacy.md) that documents
the difference. Tests that cannot run on a stack (no
``tf.estimator`` after TF 2.15, Keras 3 API changes) or that use a name
tf_dp does not map are not run (``NOT_RUN``, with the reason); cases that
take seconds each beyond the first few of a test are marked slow.
"""

import fnmatch
import unittest
from unittest import mock

from absl import flags
import pytest
import tensorflow as tf

from tests.compat import tf_privacy_tests

FILES = (
    "privacy/dp_query/dp_query_test.py",
    "privacy/dp_query/gaussian_query_test.py",
    "privacy/dp_query/nested_query_test.py",
    "privacy/dp_query/no_privacy_query_test.py",
    "privacy/dp_query/normalized_query_test.py",
    "privacy/dp_query/quantile_adaptive_clip_sum_query_test.py",
    "privacy/dp_query/quantile_estimator_query_test.py",
    "privacy/analysis/compute_dp_sgd_privacy_test.py",
    "privacy/analysis/compute_noise_from_budget_test.py",
    "privacy/optimizers/dp_optimizer_keras_test.py",
    "privacy/optimizers/dp_optimizer_test.py",
    "privacy/optimizers/dp_optimizer_eager_test.py",
    "privacy/keras_models/dp_keras_model_test.py",
    "privacy/keras_models/dp_keras_model_distributed_test.py",
)
# Not listed: the test files of modules tf_dp.compat does not map (the
# migration table, "Not mapped"): dp_optimizer_vectorized, tree
# aggregation, discrete Gaussian and Skellam queries, bolt-on, Estimator
# heads, the fast_gradient_clipping internals (clip_grads, registry
# functions), dp_optimizer_keras_sparse.

_STATEMENT = (
    "tf_dp writes its own statement text (its numbers are TF Privacy's: "
    "tests/compat/test_compute_dp_sgd_privacy_lib.py); migration table, "
    "compute_dp_sgd_privacy_statement")
# "<file stem>.<class>.<method>" -> the documented difference it checks.
EXPECTED_DIFFERENCES = {
    "gaussian_query_test.GaussianQueryTest."
    "test_gaussian_sum_with_changing_clip_no_noise":
        "the clip is a number, not a tf.Variable (migration table, "
        "GaussianSumQuery: numeric clips)",
    **{f"compute_dp_sgd_privacy_test.ComputeDpSgdPrivacyTest."
       f"test_dp_sgd_privacy_statement_{case}": _STATEMENT
       for case in ("no_user_dp_with_rdp", "user_dp_with_rdp",
                    "user_dp_infinite_with_rdp", "no_user_dp_with_pld",
                    "user_dp_with_pld")},
}
# Not run, with the reason.
NOT_RUN = {
    "nested_query_test.NestedQueryTest.test_nested_query_with_noise":
        "its tolerance (0.1 on a noise stddev of 2.718 estimated from 1000 "
        "samples: 1.6 standard errors) fails about 1 run in 10 for exact "
        "Gaussian noise (tf_dp's is keyed from OS entropy, so no seed makes "
        "it repeatable); NestedQuery's noise is tested in "
        "tests/dp_query/test_nested_query.py",
}


_FTRL = ("DP-FTRL tree aggregation is not mapped (migration table, Not "
         "mapped)")
NOT_RUN.update({
    "dp_optimizer_keras_test.*.*DPFTRLTreeAggregation*": _FTRL,
    "dp_optimizer_keras_test.DPTreeAggregation*": _FTRL,
    "dp_keras_model_distributed_test.*":
        "TF's distribute test combinations run under TF's multi-process "
        "test main (tf.__internal__.distribute.multi_process_runner), which "
        "pytest cannot host; tf_dp's multi-replica Keras step is tested in "
        "tests/distribute",
})
# Keras DP optimizers' get_updates(loss, params) in an Estimator model_fn.
_KERAS_IN_ESTIMATOR = [
    f"dp_optimizer_keras_test.DPOptimizerGetGradientsTest.{test}*"
    for test in ("testBaseline", "testClippingNorm", "testNoiseMultiplier")]
if not hasattr(tf, "estimator"):
  NOT_RUN.update({key: (
      f"tf.estimator exists up to TF 2.15 only (this is TF "
      f"{tf.__version__}); run on the TF 2.15 stack") for key in (
          ["dp_optimizer_test.DPOptimizerTest.testEstimator"]
          + _KERAS_IN_ESTIMATOR)})
_KERAS3 = hasattr(tf.keras, "ops")  # tf.keras is Keras 3 (TF 2.16 and later).
_MIGRATING = "migration table"
_BARE_VARIABLES = (
    f"tf_dp computes per-example gradients in make_private's train step: "
    f"its optimizers have no _compute_gradients / minimize(loss, var_list) "
    f"on bare variables ({_MIGRATING}, DPKeras*Optimizer: per-example "
    f"gradients in the model's step; the noise-free cases are ported to "
    f"models in tests/compat/test_dp_optimizer_keras.py)")
_SUMMED = (
    f"apply_gradients outside tf_dp's step raises an error naming "
    f"make_private, not an AssertionError ({_MIGRATING}, DPKeras*Optimizer); "
    f"on Keras 3, Keras's apply_gradients first raises a TypeError for the "
    f"test's argument (a variable, not a list of pairs)")
_DATASET = (
    f"fit on a tf.data pipeline needs population_size, the n of the "
    f"accounting (the first step fails naming it; {_MIGRATING}, "
    f"DPSequential/DPModel and DPKeras*Optimizer: population_size)")
_FIXED_ORDER = (
    f"fit(..., shuffle=False) takes its batches in a fixed order, which "
    f"tf_dp refuses under the default sampling=\"shuffled\" (the ledger "
    f"would account the batches as random samples; {_MIGRATING}, "
    f"DPKeras*Optimizer: sampling=\"fixed_order\" declares the order)")
_V1_POPULATION = (
    f"the compat.v1 optimizers need population_size= ({_MIGRATING}, "
    f"privacy.optimizers.dp_optimizer: population_size required)")
EXPECTED_DIFFERENCES.update({
    **{f"dp_optimizer_keras_test.DPOptimizerComputeGradientsTest.{test}*":
       _BARE_VARIABLES for test in (
           "testBaselineWith", "testClippingNorm", "testNoiseMultiplier")},
    "dp_optimizer_keras_test.DPOptimizerGetGradientsTest.testLargeBatch*":
        _BARE_VARIABLES,
    "dp_optimizer_keras_test.DPOptimizerComputeGradientsTest."
    "testKerasModelBaselineNoNoise*": _FIXED_ORDER,
    "dp_optimizer_keras_test.DPOptimizerGetGradientsTest.testRaisesOnNo*":
        _SUMMED,
    "dp_optimizer_keras_test.DPVectorizedOptimizerUnconnectedNodesTest.*":
        f"unconnected_gradients_to_zero is not an argument of tf_dp's "
        f"optimizers ({_MIGRATING}, DPKeras*Optimizer), and {_DATASET}",
    "dp_keras_model_test.DPKerasModelTest.testClippingNorm*": _DATASET,
    "dp_keras_model_test.DPKerasModelTest.testMicrobatches*": _DATASET,
    "dp_keras_model_test.DPKerasModelTest.testMultiDimensionalOutput*": (
        f"its labels 0 and 1 are out of range for its 1-unit output: plain "
        f"Keras fit raises the same InvalidArgumentError; TF Privacy's XLA "
        f"step (use_xla=True) trained on a NaN loss ({_MIGRATING}, "
        f"DPSequential/DPModel: use_xla ignored)"),
    **{f"dp_optimizer{stem}.{test}*": _V1_POPULATION
       for stem in ("_test.DPOptimizerTest", "_eager_test.DPOptimizerEagerTest")
       for test in ("testAssertOnNoCall", "testBaseline", "testClippingNorm",
                    "testDPGaussianOptimizerClass", "testEstimator",
                    "testNoiseMultiplier", "testNoneGradients",
                    "testUnrollMicrobatches")},
    "dp_optimizer_test.DPOptimizerTest.testComputeGradientsOverrideWarning": (
        f"make_optimizer_class logs no warning for a class that overrides "
        f"compute_gradients ({_MIGRATING}, privacy.optimizers.dp_optimizer)"),
})
if _KERAS3:
  NOT_RUN.update({
      "dp_keras_model_test.DPKerasModelTest.test*Regularization*": (
          "it applies tf.multiply to a KerasTensor, which Keras 3 (tf.keras "
          "on TF 2.16 and later) refuses without tf_dp"),
      "dp_optimizer_keras_test.DPOptimizerComputeGradientsTest."
      "testKerasModelBaseline*Saving*": (
          "model.save(save_format='tf') is refused by Keras 3 (tf.keras on TF "
          "2.16 and later) without tf_dp"),
      "dp_optimizer_test.DPOptimizerTest.testWriteOutAndReloadAdam": (
          "tf.keras.optimizers.legacy.Adam does not exist in Keras 3 (tf.keras "
          "on TF 2.16 and later)"),
  })
else:
  EXPECTED_DIFFERENCES.update({
      key: ("an Estimator trains with the compat.v1 optimizers of "
            "privacy.optimizers.dp_optimizer; a Keras DP optimizer is "
            "refused in the Estimator's graph (TensorFlow 2 behaviour only, "
            f"{_MIGRATING}, DPKeras*Optimizer) and has no "
            f"get_updates(loss, params): {_BARE_VARIABLES}")
      for key in _KERAS_IN_ESTIMATOR})
  EXPECTED_DIFFERENCES.update({
      "dp_optimizer_keras_test.DPOptimizerComputeGradientsTest."
      "testKerasModelBaseline*Saving*": _FIXED_ORDER,
      "dp_optimizer_test.DPOptimizerTest.testWriteOutAndReloadAdam": (
          f"make_gaussian_optimizer_class takes a tf.compat.v1.train "
          f"optimizer; a Keras optimizer goes to make_keras_optimizer_class "
          f"({_MIGRATING}, privacy.optimizers.dp_optimizer)"),
      "dp_keras_model_test.DPKerasModelTest."
      "testCustomRegularizationZeroGradient*": (
          f"an add_loss term that depends on the data is refused (TF "
          f"Privacy left it out of the gradient without a word; "
          f"{_MIGRATING}, DPSequential/DPModel)"),
  })
# DPKerasModelTest's odd cases (fast_clipping=True) pass TF Privacy's
# default layer_registry, which means tf_dp's own rules, as None does.
_MODEL_TEST = "dp_keras_model_test.DPKerasModelTest."
NOT_RUN.update({
    f"{_MODEL_TEST}{test}{i}": (
        f"fast_clipping=True passes make_default_layer_registry(), which "
        f"tf_dp reads as None ({_MIGRATING}, DPSequential/DPModel): the "
        f"same step as {test}{i - 1}, which runs")
    for test, cases in (("testNoiseMultiplier", 32),
                        ("testMultiDimensionalOutput", 12))
    for i in range(1, cases, 2)})
# The even cases left take 3 to 6 s each (a DP step traced per case): CI
# runs the first on every stack and, on the stack that runs slow tests, one
# that changes clip, noise and microbatches (case 0: clip 3, noise 2, None;
# case 30: clip 5, noise 4, 4 microbatches).
_RUN = {"testNoiseMultiplier": {0}, "testMultiDimensionalOutput": {0}}
_ADAPTIVE = ("quantile_adaptive_clip_sum_query_test."
             "QuantileAdaptiveClipSumQueryTest.")
# Slow: run on the stack that runs slow tests only (TF 2.21). Besides that
# case, the query tests that take 2 to 19 s (1000 eager query runs that
# estimate a noise stddev, 50-step adaptations): the query code is the same
# TensorFlow ops on both stacks, and tf_dp's noise has its own tests
# (tests/dp_query).
SLOW = {
    f"{_MODEL_TEST}testNoiseMultiplier30",
    f"{_ADAPTIVE}test_sum_with_noise",
    f"{_ADAPTIVE}test_adaptation_linspace*",
    f"{_ADAPTIVE}test_adaptation_all_equal*",
    "gaussian_query_test.GaussianQueryTest.test_gaussian_sum_with_noise",
    "quantile_estimator_query_test.QuantileEstimatorQueryTest."
    "test_tree_noise_restart",
}
NOT_RUN.update({
    f"{_MODEL_TEST}{test}{i}": (
        f"the same step as the cases of {test} that run, with other "
        f"values of the same parameters; {seconds} s each")
    for test, cases, seconds in (("testNoiseMultiplier", 32, 6),
                                 ("testMultiDimensionalOutput", 12, 3))
    for i in range(0, cases, 2)
    if i not in _RUN[test] and f"{_MODEL_TEST}{test}{i}" not in SLOW})
# absl flags keep their defaults (pytest's command line is not theirs; TF's
# test helpers read them, e.g. for temporary folders).
if not flags.FLAGS.is_parsed():
  flags.FLAGS.mark_as_parsed()


def _graph_mode_per_test(cls):
  """TF Privacy's graph-mode classes turn eager execution off for the whole
  process in ``setUpClass``, which TensorFlow cannot undo. Here that call
  only marks the class, and each of its tests runs in a graph of its own
  (as ``tf.compat.v1`` code runs in graph mode): the tests after them run
  eagerly, as they would alone."""
  set_up_class, set_up, tear_down = cls.setUpClass, cls.setUp, cls.tearDown
  graph_mode = []

  def set_up_class_(_):
    with mock.patch.object(tf.compat.v1, "disable_eager_execution",
                           lambda: graph_mode.append(True)):
      set_up_class()

  def set_up_(self):
    set_up(self)  # tf.test.TestCase.setUp resets the default graph.
    if graph_mode:
      self._tf_dp_graph = tf.Graph().as_default()
      self._tf_dp_graph.__enter__()

  def tear_down_(self):
    try:
      tear_down(self)
    finally:
      if graph_mode:
        self._tf_dp_graph.__exit__(None, None, None)

  cls.setUpClass = classmethod(set_up_class_)
  cls.setUp, cls.tearDown = set_up_, tear_down_


def _mark(cls, test_id_prefix):
  """Marks the tests of ``cls`` listed in EXPECTED_DIFFERENCES, NOT_RUN or
  SLOW (keys: a test id, or a pattern with ``*``)."""
  for method in [m for m in dir(cls) if m.startswith("test")]:
    test_id = test_id_prefix + method
    function = getattr(cls, method)
    for table, mark in ((EXPECTED_DIFFERENCES, lambda r: pytest.mark.xfail(
        strict=True, reason=r)), (NOT_RUN, pytest.mark.skip),
                        (dict.fromkeys(SLOW, ""), lambda r: pytest.mark.slow)):
      reason = next((r for key, r in table.items()
                     if fnmatch.fnmatchcase(test_id, key)), None)
      if reason is not None:
        function = mark(reason)(function)
        setattr(cls, method, function)


def _bind(path):
  module = tf_privacy_tests.load_test_module(path)
  stem = path.rsplit("/", 1)[-1][:-3]
  for name, cls in list(vars(module).items()):
    if not (isinstance(cls, type) and issubclass(cls, unittest.TestCase)
            and cls.__module__ == module.__name__):
      continue
    _mark(cls, f"{stem}.{name}.")
    _graph_mode_per_test(cls)
    globals()[f"Test_{stem}_{name}"] = cls


for _path in FILES:
  _bind(_path)
