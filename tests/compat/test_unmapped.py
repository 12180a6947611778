"""TF Privacy modules that tf_dp.compat does not map: importing one says
what to use instead (tf_dp/compat/tensorflow_privacy/_unmapped.py), where
Python said only "No module named ..."."""

import importlib
import re

import pytest

from tf_dp.compat.tensorflow_privacy import _unmapped

PACKAGE = "tf_dp.compat.tensorflow_privacy"


@pytest.mark.parametrize("statement", [
    f"import {PACKAGE}.privacy.optimizers.dp_optimizer_vectorized",
    f"from {PACKAGE}.privacy.optimizers import dp_optimizer_vectorized",
    f"from {PACKAGE}.privacy.optimizers.dp_optimizer_vectorized import "
    f"VectorizedDPSGD"])
def test_dp_optimizer_vectorized_names_what_to_use(statement):
  with pytest.raises(ImportError) as refusal:
    exec(statement, {})  # pylint: disable=exec-used
  assert isinstance(refusal.value, _unmapped.UnmappedModuleError)
  said = str(refusal.value)
  assert said.startswith(f"No module named '{PACKAGE}.privacy.optimizers."
                         f"dp_optimizer_vectorized': tf_dp.compat does not "
                         f"map TF Privacy's tensorflow_privacy.privacy."
                         f"optimizers.dp_optimizer_vectorized")
  for text in ("DPGradientDescentGaussianOptimizer", "population_size=",
               "docs/guides/migrating_from_tf_privacy.md"):
    assert text in said
  assert refusal.value.name == (
      f"{PACKAGE}.privacy.optimizers.dp_optimizer_vectorized")


@pytest.mark.parametrize("module", sorted(_unmapped.UNMAPPED))
def test_every_unmapped_module_says_what_to_use(module):
  """Also fails when a module of the list comes to exist (the real module
  is found first): then it is mapped, and leaves the list."""
  with pytest.raises(_unmapped.UnmappedModuleError,
                     match=re.escape(f"TF Privacy's tensorflow_privacy."
                                     f"{module}, ")):
    importlib.import_module(f"{PACKAGE}.{module}")


def test_modules_inside_an_unmapped_package_and_other_names():
  with pytest.raises(_unmapped.UnmappedModuleError, match="bolt-on DP"):
    importlib.import_module(f"{PACKAGE}.privacy.bolt_on.models")
  with pytest.raises(_unmapped.UnmappedModuleError, match="compat.v1 names"):
    exec(f"from {PACKAGE} import v1", {})  # pylint: disable=exec-used
  # A name that is no TF Privacy module is Python's business.
  with pytest.raises(ModuleNotFoundError) as missing:
    importlib.import_module(f"{PACKAGE}.privacy.optimizers.no_such_module")
  assert not isinstance(missing.value, _unmapped.UnmappedModuleError)
  assert importlib.import_module(f"{PACKAGE}.privacy.optimizers.dp_optimizer")


def _resolve(dotted):
  """The object a dotted ``tf_dp...`` name denotes (module or attribute)."""
  parts = dotted.split(".")
  for end in range(len(parts), 0, -1):
    try:
      value = importlib.import_module(".".join(parts[:end]))
    except ImportError:
      continue
    for attribute in parts[end:]:
      value = getattr(value, attribute)
    return value
  raise ImportError(dotted)


def test_every_replacement_named_exists():
  named = {name.rstrip(".") for instead in _unmapped.UNMAPPED.values()
           for name in re.findall(r"tf_dp(?:\.\w+)+", instead)}
  assert len(named) > 15
  for name in sorted(named):
    assert _resolve(name) is not None, name
