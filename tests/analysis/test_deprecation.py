"""Old names keep working for one release and warn with the new name."""

import json
import pickle
import sys
import types

import pytest

from tf_dp.analysis import deprecation


@deprecation.renamed_keywords(q="sampling_probability")
def _sampled(sampling_probability, steps=1):
  return sampling_probability, steps


def test_renamed_keyword_maps_and_warns():
  with pytest.warns(DeprecationWarning, match="'q'.*'sampling_probability'"):
    assert _sampled(q=0.5) == (0.5, 1)
  assert _sampled(0.25, steps=2) == (0.25, 2)


def test_both_names_are_a_type_error():
  with pytest.raises(TypeError, match="both 'sampling_probability' and"):
    _sampled(q=0.5, sampling_probability=0.5)


def test_renamed_value():
  old_to_new = {"without_replacement": "fixed_size"}
  with pytest.warns(DeprecationWarning, match="sampling='fixed_size'"):
    assert deprecation.renamed_value("sampling", "without_replacement",
                                     old_to_new) == "fixed_size"
  assert deprecation.renamed_value("sampling", "poisson",
                                   old_to_new) == "poisson"


class _Entry(deprecation.RenamedKeysDict):
  RENAMED = {"old": "new"}


def test_renamed_keys_dict_reads_old_keys_and_stores_new_ones():
  entry = _Entry(new=1)
  with pytest.warns(DeprecationWarning, match="'old'.*'new'"):
    assert entry["old"] == 1
  assert json.loads(json.dumps(entry)) == {"new": 1} == entry
  with pytest.raises(KeyError):
    entry["other"]  # pylint: disable=pointless-statement
  copy = pickle.loads(pickle.dumps(entry))
  assert type(copy) is _Entry and copy == entry


def test_module_getattr():
  module = types.ModuleType("tf_dp_test_module")
  module.__getattr__ = deprecation.module_getattr(
      "tf_dp_test_module", {"old": ("json", "dumps"), "mod": ("json", None)})
  with pytest.warns(DeprecationWarning, match="tf_dp_test_module.old"):
    assert module.old is json.dumps
  with pytest.warns(DeprecationWarning):
    assert module.mod is json
  with pytest.raises(AttributeError, match="nope"):
    module.nope  # pylint: disable=pointless-statement


def test_moved_module_returns_the_new_module():
  with pytest.warns(DeprecationWarning, match="'old.place'.*'json'"):
    assert deprecation.moved_module("old.place", sys.modules["json"]) is (
        sys.modules["json"])
