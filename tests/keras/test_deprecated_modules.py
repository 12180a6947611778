"""``tf_dp.keras.compat`` moved to ``tf_dp.keras.backend``: each old name
keeps working for one release and gives the new one, with a
``DeprecationWarning`` naming it.
"""

import pytest

from tf_dp.keras import backend


@pytest.mark.parametrize("old,new", [
    ("keras3", "keras3_module"), ("keras2", "keras2_module"),
    ("flavor_of", "flavor_of"), ("module_for", "module_for")])
def test_compat_names_warn_and_are_the_backends(old, new):
  from tf_dp.keras import compat  # pylint: disable=g-import-not-at-top
  with pytest.warns(DeprecationWarning, match=f"tf_dp.keras.backend.{new}"):
    value = getattr(compat, old)
  assert value is getattr(backend, new)


def test_compat_is_reachable_as_an_attribute():
  import tf_dp.keras  # pylint: disable=g-import-not-at-top
  with pytest.warns(DeprecationWarning, match="keras3_module"):
    assert tf_dp.keras.compat.keras3() is backend.keras3_module()
