"""``Sampling``: one typed definition of the sampling kinds, equal to its
strings everywhere a string was used."""

import json

import pytest

from tf_dp.sampling import ACCOUNTED
from tf_dp.sampling import PrivacyUnit
from tf_dp.sampling import Sampling


def test_members_are_their_strings():
  assert [s.value for s in Sampling] == ["poisson", "fixed_size", "shuffled",
                                         "fixed_order"]
  for kind in Sampling:
    assert kind == kind.value and hash(kind) == hash(kind.value)
    assert str(kind) == f"{kind}" == kind.value
    assert repr(kind) == repr(kind.value)
    assert {kind.value: 1}[kind] == 1
  assert json.loads(json.dumps({"sampling": Sampling.FIXED_SIZE})) == {
      "sampling": "fixed_size"}


def test_shuffled_is_accounted_as_fixed_size():
  assert [s.accounted_as for s in Sampling] == [
      Sampling.POISSON, Sampling.FIXED_SIZE, Sampling.FIXED_SIZE,
      Sampling.FIXED_ORDER]  # Grouped into passes: analysis.fixed_order.
  assert ACCOUNTED == (Sampling.POISSON, Sampling.FIXED_SIZE)


def test_check_returns_the_member():
  assert Sampling.check("sampling", "poisson") is Sampling.POISSON
  assert Sampling.check("sampling", Sampling.SHUFFLED) is Sampling.SHUFFLED


@pytest.mark.parametrize("value,allowed,match", [
    ("bogus", None, r"^sampling must be one of \('poisson', 'fixed_size', "
                    r"'shuffled', 'fixed_order'\); got 'bogus'\.$"),
    ("shuffled", ACCOUNTED, r"one of \('poisson', 'fixed_size'\); got "
                            r"'shuffled'"),
    (0, None, r"got 0\."),
    (None, None, r"got None\."),
])
def test_check_names_the_argument_and_the_kinds(value, allowed, match):
  with pytest.raises(ValueError, match=match):
    Sampling.check("sampling", value, allowed)


def test_privacy_units_are_their_strings_and_checked_by_name():
  assert [u.value for u in PrivacyUnit] == ["example", "user"]
  assert PrivacyUnit.USER == "user" and f"per {PrivacyUnit.USER}" == "per user"
  assert repr(PrivacyUnit.EXAMPLE) == "'example'"
  assert PrivacyUnit.check("privacy_unit", "user") is PrivacyUnit.USER
  with pytest.raises(ValueError, match=r"^privacy_unit must be one of "
                     r"\('example', 'user'\); got 'person'\.$"):
    PrivacyUnit.check("privacy_unit", "person")
