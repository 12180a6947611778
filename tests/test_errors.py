"""tf_dp's errors: one hierarchy under ValueError, raised where they mean
what they say."""

import json

import pytest

from tf_dp import analysis
from tf_dp import errors
from tf_dp.analysis import ledger_schema


def test_hierarchy():
  for cls in (errors.UnsupportedModelError, errors.SamplingMismatchError,
              errors.LedgerFormatError, errors.IncompleteLedgerError):
    assert issubclass(cls, errors.PrivacyError)
  assert issubclass(errors.PrivacyError, ValueError)
  assert issubclass(errors.RecordStructureError, ValueError)
  assert issubclass(errors.RecordStructureError, TypeError)


def _export(sampling="poisson", dropped=0, count=3):
  return {"format": ledger_schema.FORMAT_V2, "dropped_samples": dropped,
          "runs": [{"population_size": 100, "sampling_probability": 0.1,
                    "sampling": sampling, "examples_per_record": 1,
                    "sum_queries": [{"l2_norm_clip": 1.0,
                                     "noise_stddev": 1.0}],
                    "count": count}]}


@pytest.mark.parametrize("data,match", [
    (_export(sampling="bogus"), r"runs\[0\]\.sampling must be one of"),
    (_export(count=0), r"runs\[0\]\.count must be an integer >= 1"),
    (_export(dropped=-1), r"dropped_samples must be an integer >= 0"),
    ({"format": "tf_dp.privacy_ledger/9", "runs": []}, r"newer tf_dp"),
    ("{not json", r"not valid JSON"),
])
def test_invalid_ledger_exports_are_ledger_format_errors(data, match):
  with pytest.raises(errors.LedgerFormatError, match=match):
    analysis.compute_epsilon_from_ledger(data, 1e-5)


def test_a_full_ledger_is_an_incomplete_ledger_error():
  assert analysis.compute_epsilon_from_ledger(_export(), 1e-5)[0] > 0
  with pytest.raises(errors.IncompleteLedgerError, match="did not record 2"):
    analysis.compute_epsilon_from_ledger(json.dumps(_export(dropped=2)), 1e-5)


def test_poisson_microbatches_are_a_privacy_error():
  data = _export()
  data["runs"][0]["examples_per_record"] = 4
  with pytest.raises(errors.PrivacyError, match="Poisson sampling with "
                                                "microbatches"):
    analysis.compute_epsilon_from_ledger(data, 1e-5)


def test_corrupt_buffers_are_a_ledger_format_error():
  with pytest.raises(errors.LedgerFormatError, match="sampling code"):
    ledger_schema.sampling_kind(7.0)
  with pytest.raises(errors.LedgerFormatError, match="refers to sample 5"):
    ledger_schema.runs_from_buffers([[10.0, 0.1, 0.0, 1.0]],
                                    [[5.0, 1.0, 1.0]], 1, 1)


def test_a_ledger_of_another_sampling_is_a_sampling_mismatch():
  pytest.importorskip("tensorflow")
  # pylint: disable=g-import-not-at-top
  from tf_dp.core.config import DPConfig
  from tf_dp.privacy_ledger import PrivacyLedger
  ledger = PrivacyLedger(100, 0.1, sampling="fixed_size")
  with pytest.raises(errors.SamplingMismatchError, match="sampling='poisson'"
                                                         ".*'fixed_size'"):
    DPConfig(1.0, 1.0, ledger=ledger, sampling="poisson",
             sampling_probability=0.1)
  with pytest.raises(errors.SamplingMismatchError, match="population_size=50"):
    DPConfig(1.0, 1.0, ledger=ledger, population_size=50)
  assert DPConfig(1.0, 1.0, ledger=ledger).sampling == "fixed_size"


def test_redeclaring_a_samplers_lots_is_a_sampling_mismatch():
  pytest.importorskip("tensorflow")
  import numpy as np  # pylint: disable=g-import-not-at-top
  from tf_dp import data  # pylint: disable=g-import-not-at-top
  x = np.zeros((20, 2), np.float32)
  lots = data.poisson_sampled_batches(x, x, 0.5, 2, seed=1)
  with pytest.raises(errors.SamplingMismatchError, match="already marked"):
    data.declare_sampling(lots, "fixed_size", population_size=20)


def test_invalid_json_for_a_ledger_is_a_ledger_format_error():
  pytest.importorskip("tensorflow")
  from tf_dp.privacy_ledger import PrivacyLedger  # pylint: disable=g-import-not-at-top
  with pytest.raises(errors.LedgerFormatError, match="not a JSON ledger"):
    PrivacyLedger.from_json("{")
  with pytest.raises(errors.LedgerFormatError, match="missing"):
    PrivacyLedger(10, 0.1).import_buffers({})


def test_a_record_of_another_structure_is_a_record_structure_error():
  tf = pytest.importorskip("tensorflow")
  from tf_dp import dp_query  # pylint: disable=g-import-not-at-top
  query = dp_query.NestedQuery([dp_query.GaussianSumQuery(1.0, 0.0)] * 2)
  params = query.derive_sample_params(query.initial_global_state())
  with pytest.raises(errors.RecordStructureError, match="record"):
    query.preprocess_record(params, [tf.ones([2])])


def _keras_modules():
  pytest.importorskip("tensorflow")
  from tests.keras import helpers  # pylint: disable=g-import-not-at-top
  return helpers.keras_modules()


def _compiled(K, layers, **dp_kwargs):
  import tf_dp  # pylint: disable=g-import-not-at-top
  model = tf_dp.keras.make_private(K.Sequential([K.layers.Input((3,))] +
                                                layers))
  model.compile(optimizer=tf_dp.DPOptimizer(
      K.optimizers.SGD(0.1), l2_norm_clip=1.0, noise_multiplier=1.0,
      population_size=8, **dp_kwargs), loss="mse")
  return model


@pytest.mark.parametrize("K", _keras_modules())
def test_keras_models_that_mix_examples_are_unsupported_model_errors(K):
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tf_dp  # pylint: disable=g-import-not-at-top
  model = _compiled(K, [K.layers.BatchNormalization()])
  x = np.arange(24, dtype=np.float32).reshape(8, 3) / 24
  with pytest.raises(errors.UnsupportedModelError, match="combines examples"):
    model.fit(x, np.zeros((8, 1), np.float32), batch_size=8, verbose=0)
  model = _compiled(K, [K.layers.Dense(1), K.layers.Lambda(
      lambda t: t - tf.reduce_mean(t, axis=0))])
  x = np.arange(24, dtype=np.float32).reshape(8, 3) / 24
  with pytest.raises(errors.UnsupportedModelError,
                     match="combines examples"):
    tf_dp.keras.check_privacy(model, x, np.zeros((8, 1), np.float32))


@pytest.mark.parametrize("K", _keras_modules())
def test_fit_input_of_another_sampling_is_a_sampling_mismatch(K):
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tf_dp  # pylint: disable=g-import-not-at-top
  model = _compiled(K, [K.layers.Dense(1)], sampling="poisson",
                    sampling_probability=0.5)
  x, y = np.zeros((8, 3), np.float32), np.zeros((8, 1), np.float32)
  with pytest.raises(errors.SamplingMismatchError, match="arrays or tensors"):
    model.fit(x, y, batch_size=4, verbose=0)
  lots = tf_dp.data.fixed_size_sampled_batches(x, y, 4, 2, seed=1)
  with pytest.raises(errors.SamplingMismatchError, match="fixed"):
    model.fit(lots, verbose=0)


def test_a_ledger_behind_the_optimizer_is_an_incomplete_ledger_error():
  pytest.importorskip("tensorflow")
  # pylint: disable=g-import-not-at-top
  from tf_dp.keras import optimizer_state
  from tf_dp.privacy_ledger import PrivacyLedger
  ledger = PrivacyLedger(100, 0.1)
  optimizer_state.check_ledger_covers(0, ledger)
  with pytest.raises(errors.IncompleteLedgerError, match="records only 0"):
    optimizer_state.check_ledger_covers(3, ledger)
