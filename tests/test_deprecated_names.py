"""Every old name still works for one release and warns with the new name.

One test per renamed or moved name (README, "Vocabulary"): the old name
gives exactly what the new one gives, with a DeprecationWarning that names
the new one. Remove a case when its old name is removed.
"""

import importlib
import json
import math
import sys

import numpy as np
import pytest

import tf_dp
from tf_dp import analysis
from tf_dp.analysis import calibration
from tf_dp.analysis import dp_sgd_privacy
from tf_dp.analysis import event_accounting
from tf_dp.analysis import ledger as ledger_lib
from tf_dp.analysis import ledger_schema
from tf_dp.analysis import moments_accountant
from tf_dp.analysis import pld
from tf_dp.analysis import rdp_fixed_size
from tf_dp.reproductions import dpd_accounting

ORDERS = [2.0, 4.0, 8.0, 16.0, 32.0]

# Written by tf_dp before the vocabulary was unified (old key
# "selection_probability"), and the epsilons that version computed from
# them (delta 1e-5).
OLD_POISSON_V2 = (
    '{"format": "tf_dp.privacy_ledger/2", "dropped_samples": 0, "runs": '
    '[{"population_size": 60000, "selection_probability": '
    '0.004266666666666667, "sampling": "poisson", "examples_per_record": 1, '
    '"sum_queries": [{"l2_norm_clip": 1.0, "noise_stddev": 1.100000023841858},'
    ' {"l2_norm_clip": 0.5, "noise_stddev": 0.8999999761581421}], "count": 5},'
    ' {"population_size": 60000, "selection_probability": '
    '0.008533333333333334, "sampling": "poisson", "examples_per_record": 1, '
    '"sum_queries": [{"l2_norm_clip": 1.0, "noise_stddev": '
    '1.2999999523162842}], "count": 3}]}')
OLD_FIXED_SIZE_V1 = json.dumps({
    "format": "tf_dp.privacy_ledger/1", "dropped_samples": 0,
    "samples": [{"population_size": 1000, "selection_probability": 0.05,
                 "sampling": "fixed_size", "examples_per_record": 1,
                 "sum_queries": [{"l2_norm_clip": 2.0,
                                  "noise_stddev": 2.4000000953674316}]}] * 4})
OLD_EPSILONS = {  # (file, accountant) -> epsilon by the old version.
    ("poisson", "pld"): 0.15793350162787007,
    ("poisson", "rdp"): 0.9383589847838263,
    ("fixed_size", "pld"): 4.687073289826853,
    ("fixed_size", "rdp"): 6.451194112667146,
}


def _warns(new):
  return pytest.warns(DeprecationWarning, match=new)


def _fresh_import(name):
  """Imports ``name`` anew (so that an import-time warning fires again)."""
  for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
    del sys.modules[key]
  parent, _, child = name.rpartition(".")
  if parent and child in vars(sys.modules[parent]):
    delattr(sys.modules[parent], child)
  return importlib.import_module(name)


# --- The probability that a record is in a lot: sampling_probability. ---


@pytest.mark.parametrize("fn,args", [
    (analysis.compute_rdp, dict(noise_multiplier=1.1, steps=10,
                                orders=ORDERS)),
    (analysis.compute_rdp_fixed_size, dict(noise_multiplier=1.1, steps=10,
                                           orders=ORDERS)),
    (moments_accountant.log_moment, dict(noise_multiplier=1.1, lam=4)),
    (analysis.moments_accountant_epsilon, dict(noise_multiplier=4.0,
                                               steps=100, delta=1e-5,
                                               max_lambda=8)),
    (analysis.strong_composition_dp_sgd_epsilon, dict(
        noise_multiplier=4.0, steps=100, delta=1e-5)),
    (pld.dp_sgd_pld_epsilon, dict(noise_multiplier=1.1, steps=10,
                                  delta=1e-5)),
    (dp_sgd_privacy.dp_sgd_rdp, dict(noise_multiplier=1.1, steps=10,
                                     orders=ORDERS, sampling="poisson")),
])
def test_keyword_q_is_sampling_probability(fn, args):
  expected = fn(sampling_probability=0.01, **args)
  with _warns("'sampling_probability'"):
    old = fn(q=0.01, **args)
  np.testing.assert_array_equal(old, expected)


def test_amplify_by_poisson_sampling_keyword_q():
  expected = analysis.amplify_by_poisson_sampling(1.0, 1e-6,
                                                  sampling_probability=0.1)
  with _warns("'sampling_probability'"):
    assert analysis.amplify_by_poisson_sampling(1.0, 1e-6, q=0.1) == expected


@pytest.mark.parametrize("fn", [dpd_accounting.dpd_epsilon,
                                dpd_accounting.dpd_noise_multiplier])
def test_dpd_keyword_sampling_rate(fn):
  expected = fn(1.0, 1e-4, sampling_probability=0.05, iterations=200)
  with _warns("'sampling_probability'"):
    assert fn(1.0, 1e-4, sampling_rate=0.05, iterations=200) == expected


def test_ledger_event_selection_probability():
  event = ledger_lib.LedgerEvent("poisson", 0.01, 1.1, 60000, 1)
  with _warns("sampling_probability"):
    assert event.selection_probability == 0.01
  with _warns("'sampling_probability'"):
    assert ledger_lib.LedgerEvent(
        "poisson", selection_probability=0.01, noise_multiplier=1.1,
        population_size=60000, examples_per_record=1) == event


# --- The fixed-size sampling scheme: "fixed_size". ---


@pytest.mark.parametrize("fn,args", [
    (analysis.compute_dp_sgd_privacy, (1000, 250, 2.0, 3, 1e-5)),
    (analysis.compute_noise_multiplier, (1000, 250, 3.0, 3, 1e-5)),
    (analysis.compute_epochs, (1000, 250, 2.0, 3.0, 1e-5)),
    (analysis.compute_batch_size, (1000, 2.0, 3.0, 3, 1e-5)),
])
def test_sampling_without_replacement_is_fixed_size(fn, args):
  expected = fn(*args, sampling="fixed_size")
  with _warns("sampling='fixed_size'"):
    assert fn(*args, sampling="without_replacement") == expected


def test_gaussian_event_and_constants():
  with _warns("sampling='fixed_size'"):
    event = pld.GaussianEvent("without_replacement", 0.25, 2.0)
  assert event == pld.GaussianEvent("fixed_size", 0.25, 2.0)
  with _warns("FIXED_SIZE"):
    assert pld.WITHOUT_REPLACEMENT == pld.FIXED_SIZE
  with _warns("FIXED_SIZE_KINDS"):
    assert ledger_schema.WITHOUT_REPLACEMENT_KINDS == (
        ledger_schema.FIXED_SIZE_KINDS)


def test_compute_rdp_sample_without_replacement():
  expected = analysis.compute_rdp_fixed_size(0.01, 1.1, 10, ORDERS)
  with _warns("compute_rdp_fixed_size"):
    old = analysis.compute_rdp_sample_without_replacement
  np.testing.assert_array_equal(old(0.01, 1.1, 10, ORDERS), expected)
  with _warns("compute_rdp_fixed_size"):
    assert rdp_fixed_size.compute_rdp_sample_without_replacement is (
        analysis.compute_rdp_fixed_size)
  with _warns("tf_dp.analysis.rdp_fixed_size"):
    module = _fresh_import("tf_dp.analysis.rdp_without_replacement")
  assert module is sys.modules["tf_dp.analysis.rdp_fixed_size"]


# --- conversion, not conversion_method. ---


def test_conversion_method_keyword():
  data = json.loads(OLD_POISSON_V2.replace("selection_probability",
                                           "sampling_probability"))
  expected = analysis.compute_epsilon_from_ledger(data, 1e-5,
                                                  conversion="classic")
  with _warns("'conversion'"):
    assert analysis.compute_epsilon_from_ledger(
        data, 1e-5, conversion_method="classic") == expected
  runs = ledger_lib.ledger_event_runs(data)
  with _warns("'conversion'"):
    assert event_accounting.epsilon_of_runs(
        runs, 1e-5, conversion_method="classic") == expected


# --- Old ledger exports (key "selection_probability"). ---


@pytest.mark.parametrize("kind,text", [("poisson", OLD_POISSON_V2),
                                       ("fixed_size", OLD_FIXED_SIZE_V1)])
@pytest.mark.parametrize("accountant", ["pld", "rdp"])
def test_old_ledger_json_loads_and_gives_the_same_epsilon(kind, text,
                                                          accountant):
  with _warns("'sampling_probability'"):
    eps, _ = analysis.compute_epsilon_from_ledger(text, 1e-5,
                                                  accountant=accountant)
  renamed = text.replace("selection_probability", "sampling_probability")
  assert eps == analysis.compute_epsilon_from_ledger(
      renamed, 1e-5, accountant=accountant)[0]
  # The value the old version computed (TF 2.21 stack); numpy 1's FFT (TF
  # 2.15 stack) differs in the 12th digit, hence 1e-9, not equality.
  assert eps == pytest.approx(OLD_EPSILONS[kind, accountant], rel=1e-9)


def test_old_ledger_json_one_warning_per_export():
  with pytest.warns(DeprecationWarning) as record:
    ledger_schema.decode(json.loads(OLD_FIXED_SIZE_V1))
  assert len([w for w in record
              if issubclass(w.category, DeprecationWarning)]) == 1


def test_exported_entries_answer_the_old_key():
  runs, _ = ledger_schema.decode(json.loads(
      OLD_POISSON_V2.replace("selection_probability",
                             "sampling_probability")))
  entry = ledger_schema.encode(runs, 0, ledger_schema.FORMAT_V1)[
      "samples"][0]
  assert "selection_probability" not in json.dumps(entry)
  with _warns("'sampling_probability'"):
    assert entry["selection_probability"] == entry["sampling_probability"]


# --- The TensorFlow side: the ledger, the allocation strategies. ---


def test_privacy_ledger_old_names():
  pytest.importorskip("tensorflow")
  # pylint: disable=g-import-not-at-top
  from tf_dp import privacy_ledger
  with _warns("'sampling_probability'"):
    ledger = privacy_ledger.PrivacyLedger(100, selection_probability=0.1)
  with _warns("PrivacyLedger.sampling_probability"):
    assert ledger.selection_probability is ledger.sampling_probability
  with _warns("'sampling_probability'"):
    ledger.set_sample_size(selection_probability=0.2)
  assert float(ledger.sampling_probability.numpy()) == 0.2
  with _warns("SAMPLING_KINDS"):
    assert privacy_ledger.SAMPLING_METHODS == ledger_schema.SAMPLING_KINDS
  with _warns("FORMAT_V1"):
    assert privacy_ledger.LEDGER_FORMAT == ledger_schema.FORMAT_V1
  with _warns("'sampling_probability'"):
    rebuilt = privacy_ledger.PrivacyLedger.from_json(OLD_POISSON_V2)
  assert analysis.compute_epsilon_from_ledger(rebuilt, 1e-5)[0] == (
      pytest.approx(OLD_EPSILONS["poisson", "pld"], rel=1e-9))


def test_clipping_dimension_adjusted():
  tf = pytest.importorskip("tensorflow")
  # pylint: disable=g-import-not-at-top
  from tf_dp.dp_query import allocation
  dims = [6, 2]
  expected = allocation.group_clips(2.0, dims, "dimensionality_adjusted")
  with _warns("clipping='dimensionality_adjusted'"):
    assert allocation.group_clips(2.0, dims, "dimension_adjusted") == expected
  template = [tf.zeros([6]), tf.zeros([2])]
  with _warns("clipping='dimensionality_adjusted'"):
    query = allocation.build_query(template, 2.0, 1.1,
                                   clipping="dimension_adjusted")
  assert [q.l2_norm_clip for q in query.queries] == pytest.approx(expected)


# --- Moved: DP dropout, DP-PCA and the audits, to tf_dp.reproductions. ---


@pytest.mark.parametrize("name", ["dpd_epsilon", "dpd_noise_multiplier",
                                  "dpd_dropout_rates"])
def test_dpd_accounting_names_in_tf_dp_analysis(name):
  with _warns(f"tf_dp.reproductions.dpd_accounting.{name}"):
    assert getattr(analysis, name) is getattr(dpd_accounting, name)


def test_dpd_accounting_module():
  with _warns("tf_dp.reproductions.dpd_accounting"):
    assert _fresh_import("tf_dp.analysis.dpd") is dpd_accounting


def test_keras_dpd_module_and_its_old_names():
  pytest.importorskip("tensorflow")
  dpd = importlib.import_module("tf_dp.reproductions.dpd")
  with _warns("tf_dp.reproductions.dpd"):
    assert _fresh_import("tf_dp.keras.dpd") is dpd
  with _warns("CLIPPING_UNITS"):
    assert dpd.CLIPPINGS == dpd.CLIPPING_UNITS
  with _warns("'clipping_unit'"):
    _, info = dpd.make_dpd_optimizer(100, 10, 1, 2.0, 0.05,
                                     noise_multiplier=1.0,
                                     clipping="per_example")
  assert info["clipping_unit"] == "per_example"
  with _warns("'clipping_unit'"):
    assert info["clipping"] == "per_example"
  with _warns("'sampling_probability'"):
    assert info["sampling_rate"] == info["sampling_probability"] == 0.1


def test_dp_pca_module_and_top_level_names():
  pytest.importorskip("tensorflow")
  dp_pca = importlib.import_module("tf_dp.reproductions.dp_pca")
  with _warns("tf_dp.reproductions.dp_pca"):
    assert _fresh_import("tf_dp.dp_pca") is dp_pca
  tf_dp.__dict__.pop("dp_pca", None)
  with _warns("tf_dp.reproductions.dp_pca"):
    assert tf_dp.dp_pca is dp_pca
  with _warns("tf_dp.reproductions.dp_pca.dp_principal_directions"):
    assert tf_dp.dp_principal_directions is dp_pca.dp_principal_directions


def test_audit_package_and_submodules():
  pytest.importorskip("tensorflow")
  # pylint: disable=g-import-not-at-top
  from tf_dp.reproductions import audit
  from tf_dp.reproductions.audit import dpsgd_audit
  with _warns("tf_dp.reproductions.audit"):
    old = _fresh_import("tf_dp.audit")
  assert old.ClipOffQuery is audit.ClipOffQuery
  assert old.epsilon_lower_bound is audit.epsilon_lower_bound
  from tf_dp.audit import bounds  # pylint: disable=g-import-not-at-top
  assert bounds is audit.bounds
  assert importlib.import_module("tf_dp.audit.dpsgd_audit") is dpsgd_audit


def test_no_warning_from_the_new_names(recwarn):
  analysis.compute_dp_sgd_privacy(1000, 250, 2.0, 3, 1e-5,
                                  sampling="fixed_size")
  calibration.compute_epochs(1000, 250, 2.0, 3.0, 1e-5, sampling="poisson")
  assert not [w for w in recwarn if w.category is DeprecationWarning]
  assert math.isfinite(dpd_accounting.dpd_noise_multiplier(
      1.0, 1e-4, sampling_probability=0.05, iterations=200))
