"""How refusals name the constructor a user called (tf_dp.core.caller_api)."""

import pytest

from tf_dp.core import caller_api

pytestmark = pytest.mark.stack_independent  # Pure Python (tests/conftest.py).

WRAPPER = caller_api.CallerApi(
    "DPWrapped", renamed=(("dp_query", "sum_query"),),
    added=frozenset({"population_size"}), added_note="a keyword it adds",
    not_taken=frozenset({"sampling"}),
    not_taken_call="build(..., {setting})")


def test_tf_dp_names_its_own_call():
  assert caller_api.TF_DP.setting("population_size", "len(x_train)") == (
      "DPOptimizer(..., population_size=len(x_train))")
  assert caller_api.TF_DP.argument("dp_query") == "dp_query"


def test_a_wrapper_is_named_with_its_arguments():
  assert WRAPPER.argument("dp_query") == "sum_query"
  assert WRAPPER.setting("dp_query", "q") == "DPWrapped(..., sum_query=q)"
  assert WRAPPER.setting("population_size", "10") == (
      "DPWrapped(..., population_size=10) (population_size is a keyword it "
      "adds)")
  assert WRAPPER.setting("sampling", "'poisson'") == (
      "build(..., sampling='poisson') (DPWrapped does not take sampling)")

