"""The validated configuration of the DP step (tf_dp.core.config)."""

import numpy as np
import pytest

from tf_dp import dp_query
from tf_dp import privacy_ledger
from tf_dp.core import caller_api
from tf_dp.core import config as config_lib


@pytest.mark.parametrize("kwargs, argument", [
    (dict(l2_norm_clip=0.0), "l2_norm_clip"),
    (dict(l2_norm_clip=float("inf")), "l2_norm_clip"),
    (dict(noise_multiplier=-1.0), "noise_multiplier"),
    (dict(num_microbatches=0), "num_microbatches"),
    (dict(gradient_accumulation_steps=True), "gradient_accumulation_steps"),
    (dict(sampling="uniform"), "sampling"),
    (dict(sampling="poisson"), "sampling_probability"),
    (dict(sampling="poisson", sampling_probability=0.1, num_microbatches=2),
     "num_microbatches"),
    (dict(population_size=0), "population_size"),
    (dict(per_example_method="jacobian"), "per_example_method"),
    (dict(secure_mode=1), "secure_mode"),
])
def test_invalid_arguments_are_refused_by_name(kwargs, argument):
  arguments = dict(l2_norm_clip=1.0, noise_multiplier=1.0,
                   population_size=100)
  arguments.update(kwargs)
  with pytest.raises(ValueError, match=argument):
    config_lib.DPConfig(**arguments)


def _averaging_queries():
  total = dp_query.GaussianSumQuery(1.0, 1.0)
  average = dp_query.NormalizedQuery(total, 8.0)
  ledger = privacy_ledger.PrivacyLedger(100, 0.08)
  return [average, privacy_ledger.QueryWithLedger(average, ledger),
          dp_query.NestedQuery({"a": total, "b": [average]}),
          dp_query.build_query([np.zeros(3), np.zeros(2)], 1.0, 1.0,
                               clipping="per_layer", denominator=8.0)]


@pytest.mark.parametrize("query", _averaging_queries())
def test_a_dp_query_that_averages_is_refused(query):
  # The step divides the noised sum by the lot's denominator: a
  # NormalizedQuery would make it divide twice, silently.
  with pytest.raises(ValueError, match="NormalizedQuery"):
    config_lib.DPConfig(None, None, dp_query=query, population_size=100)


def test_a_dp_query_that_sums_is_accepted():
  total = dp_query.GaussianSumQuery(1.0, 1.0)
  for query in [total, dp_query.NestedQuery({"a": total, "b": [total]}),
                dp_query.build_query([np.zeros(3), np.zeros(2)], 1.0, 1.0,
                                     clipping="per_layer")]:
    config = config_lib.DPConfig(None, None, dp_query=query,
                                 population_size=100)
    assert config.dp_query is query


def test_population_size_is_required_unless_fit_can_infer_it():
  with pytest.raises(ValueError, match="population_size is required"):
    config_lib.DPConfig(1.0, 1.0, sampling="fixed_size")
  cfg = config_lib.DPConfig(1.0, 1.0)  # shuffled: inferred from fit
  assert cfg.population_size is None and cfg.population_size_deferred()


def test_a_ledger_sets_n_and_sampling():
  ledger = privacy_ledger.PrivacyLedger(500, 0.02, sampling="poisson")
  cfg = config_lib.DPConfig(1.0, 1.0, ledger=ledger)
  assert (cfg.population_size, cfg.sampling) == (500, "poisson")
  assert cfg.sampling_probability == pytest.approx(0.02)


def test_a_custom_query_is_not_serialised():
  cfg = config_lib.DPConfig(None, None, population_size=10,
                            dp_query=dp_query.GaussianSumQuery(1.0, 1.0))
  with pytest.raises(ValueError, match="custom dp_query"):
    cfg.to_dict()
  assert config_lib.DPConfig(1.0, 1.0, population_size=10).to_dict()[
      "population_size"] == 10


@pytest.mark.parametrize("kwargs, match", [
    (dict(privacy_unit="users"), "privacy_unit must be one of"),
    (dict(max_examples_per_user=4), "needs privacy_unit='user'"),
    (dict(privacy_unit="user"), "needs max_examples_per_user"),
    (dict(privacy_unit="user", max_examples_per_user=0),
     "needs max_examples_per_user"),
    (dict(privacy_unit="user", max_examples_per_user=4, sampling="shuffled"),
     "needs lots drawn over users: pass sampling='poisson'"),
    (dict(privacy_unit="user", max_examples_per_user=4, num_microbatches=2),
     "num_microbatches=2 cannot be combined with privacy_unit='user'"),
    (dict(privacy_unit="user", max_examples_per_user=4,
          metrics_noise_stddev=1.0), "metrics_noise_stddev=1.0 cannot"),
])
def test_privacy_unit_is_checked_with_what_it_needs(kwargs, match):
  arguments = dict(l2_norm_clip=1.0, noise_multiplier=1.0,
                   population_size=100, sampling="poisson",
                   sampling_probability=0.1)
  arguments.update(kwargs)
  with pytest.raises(ValueError, match=match):
    config_lib.DPConfig(**arguments)


def test_user_level_config_round_trips_and_checks_the_ledger():
  cfg = config_lib.DPConfig(1.0, 1.0, population_size=100,
                            sampling="fixed_size", privacy_unit="user",
                            max_examples_per_user=4)
  assert cfg.privacy_unit == "user"
  out = cfg.to_dict()
  assert (out["privacy_unit"], out["max_examples_per_user"]) == ("user", 4)
  assert type(out["privacy_unit"]) is str
  assert config_lib.DPConfig(**out) == cfg
  per_example = privacy_ledger.PrivacyLedger(100, 0.1, sampling="fixed_size")
  with pytest.raises(ValueError, match="ledger was built with privacy_unit="
                     "'example'"):
    config_lib.DPConfig(1.0, 1.0, ledger=per_example, sampling="fixed_size",
                        privacy_unit="user", max_examples_per_user=4)


def test_a_config_names_its_caller_and_never_saves_it():
  wrapper = caller_api.CallerApi(
      "DPWrapped", renamed=(("dp_query", "sum_query"),),
      added=frozenset({"population_size"}), added_note="a keyword it adds")
  with pytest.raises(ValueError, match=r"DPWrapped\(\.\.\., population_size="
                     r"len\(x_train\)\) \(population_size is a keyword"):
    config_lib.DPConfig(1.0, 1.0, population_size=0, caller=wrapper)
  with pytest.raises(TypeError, match="^sum_query must be a tf_dp DPQuery"):
    config_lib.DPConfig(None, None, dp_query="query", population_size=10,
                        caller=wrapper)
  wrapped = config_lib.DPConfig(1.0, 1.0, population_size=10, caller=wrapper)
  assert "caller" not in wrapped.to_dict()
  rebuilt = config_lib.DPConfig(**wrapped.to_dict())
  assert rebuilt == wrapped and rebuilt.caller == caller_api.TF_DP
