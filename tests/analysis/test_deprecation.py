"""The redirects of the two moved ``tf_dp.keras`` modules warn with the new
name and give the new object."""

import json
import sys
import types

import pytest

from tf_dp.analysis import deprecation


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
