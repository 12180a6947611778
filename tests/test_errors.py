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
