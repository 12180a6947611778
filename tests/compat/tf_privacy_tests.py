"""TF Privacy's own test files, loaded against ``tf_dp.compat.tensorflow_privacy``.

The test files come from TF Privacy's release wheel on PyPI
(``tensorflow-privacy==0.9.0``, which does not install on current
TensorFlow): ``wheel_path`` finds it (``TF_DP_TF_PRIVACY_WHEEL``, else the
copy ``scripts/setup_env.sh`` puts in the environment, else ``pip download
--no-deps`` into the environment), and ``load_test_module`` executes one
file as it is, byte for byte, with every ``tensorflow_privacy.<path>``
import answered by ``tf_dp.compat.tensorflow_privacy.<path>``. TF Privacy's
test helpers (``test_utils``) come from the wheel too; nothing of TF
Privacy's library is imported. While a file executes, two things it reads
at import time but tf_dp does not provide are lent as stand-ins that raise
when used: ``tf.estimator`` where TensorFlow has none (TF 2.16 and later)
and the TF Privacy names of ``UNMAPPED``; the tests that use them are not
run (``test_tf_privacy_suite.NOT_RUN``).
"""

import importlib
import os
import pathlib
import subprocess
import sys
import types
import zipfile

VERSION = "0.9.0"
WHEEL = f"tensorflow_privacy-{VERSION}-py3-none-any.whl"
COMPAT = "tf_dp.compat.tensorflow_privacy"
# TF Privacy's helper modules for its tests, loaded from the wheel.
HELPERS = ("tensorflow_privacy.privacy.dp_query.test_utils",)
# TF Privacy names that tf_dp.compat does not map
# (docs/guides/migrating_from_tf_privacy.md, "Not mapped") and that a test file reads while it is defined (in
# a decorator's arguments): module -> names.
UNMAPPED = {
    "privacy.optimizers.dp_optimizer_keras": (
        "DPFTRLTreeAggregationOptimizer",),
}


def wheel_path():
  """The TF Privacy wheel, downloaded into the environment if missing.

  Raises:
    RuntimeError: if it is missing and ``pip download`` fails (with the
      command to run by hand).
  """
  given = os.environ.get("TF_DP_TF_PRIVACY_WHEEL")
  if given:
    return pathlib.Path(given)
  folder = pathlib.Path(sys.prefix) / "tf_privacy_wheel"
  path = folder / WHEEL
  if not path.exists():
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps",
               f"tensorflow-privacy=={VERSION}", "-d", str(folder)]
    done = subprocess.run(command, capture_output=True, text=True,
                          check=False)
    if done.returncode != 0 or not path.exists():
      raise RuntimeError(
          f"TF Privacy's tests need its wheel: run {' '.join(command)} (or "
          f"set TF_DP_TF_PRIVACY_WHEEL to the file). pip said: "
          f"{done.stderr[-500:]}")
  return path


def _source(wheel, name):
  with zipfile.ZipFile(wheel) as archive:
    return archive.read(name.replace(".", "/") + ".py").decode("utf-8")


def _exec_module(wheel, name):
  module = types.ModuleType(name)
  module.__file__ = f"{wheel}/{name.replace('.', '/')}.py"
  sys.modules[name] = module
  exec(compile(_source(wheel, name), module.__file__, "exec"),  # pylint: disable=exec-used
       module.__dict__)
  return module


class _CompatAliases:
  """While active, ``tensorflow_privacy.X`` imports ``tf_dp.compat.
  tensorflow_privacy.X`` (the same module object)."""

  def __init__(self, imported):
    self._imported = imported

  def find_spec(self, fullname, path=None, target=None):
    del path, target
    if fullname != "tensorflow_privacy" and not fullname.startswith(
        "tensorflow_privacy."):
      return None
    module = importlib.import_module(COMPAT + fullname[len(
        "tensorflow_privacy"):])
    sys.modules[fullname] = module
    self._imported.append(fullname)
    return importlib.util.spec_from_loader(fullname, _Loaded(module))


class _Loaded:
  """A loader for a module that already exists (its own ``__spec__``
  kept)."""

  def __init__(self, module):
    self._module = module
    self._spec = module.__spec__

  def create_module(self, spec):
    del spec
    return self._module

  def exec_module(self, module):
    module.__spec__ = self._spec


class _Missing:
  """A stand-in for something tf_dp or TensorFlow does not provide: any
  call or attribute raises ``NotImplementedError`` with ``why``."""

  def __init__(self, why):
    self._why = why

  def __call__(self, *args, **kwargs):
    raise NotImplementedError(self._why)

  def __getattr__(self, name):
    raise NotImplementedError(f"{self._why} (read: {name})")


def _missing_module(name, why):
  module = types.ModuleType(name)
  module.__getattr__ = _Missing(why).__getattr__
  return module


def _lend_estimator():
  """``tensorflow.estimator`` and ``tensorflow.compat.v1.estimator`` as
  stand-ins, where TensorFlow has none: ``from tensorflow import estimator``
  then finds them in ``sys.modules``. Returns the names lent."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  lent = []
  for package in ("tensorflow", "tensorflow.compat.v1"):
    package = importlib.import_module(package)
    name = package.__name__ + ".estimator"
    if not hasattr(package, "estimator") and name not in sys.modules:
      sys.modules[name] = _missing_module(
          name, f"tf.estimator exists up to TF 2.15 only (this is TF "
          f"{tf.__version__})")
      lent.append(name)
  return lent


def load_test_module(relative_path):
  """Executes TF Privacy's ``tensorflow_privacy/<relative_path>`` (a test
  file) with its ``tensorflow_privacy`` imports answered by tf_dp.compat.

  Returns:
    The module. ``tensorflow_privacy*`` names are gone from ``sys.modules``
    afterwards.
  """
  wheel = wheel_path()
  name = "tensorflow_privacy." + relative_path[:-3].replace("/", ".")
  imported = []
  finder = _CompatAliases(imported)
  sys.meta_path.insert(0, finder)
  # ``from <package> import test_utils`` reads the attribute of the
  # package, tf_dp.compat's: lend it the helper while the file executes.
  lent = []
  for helper in HELPERS:
    package, _, attribute = helper.rpartition(".")
    package = importlib.import_module(COMPAT + package[len(
        "tensorflow_privacy"):])
    setattr(package, attribute, _exec_module(wheel, helper))
    lent.append((package, attribute, helper))
  for module_name, attributes in UNMAPPED.items():
    package = importlib.import_module(f"{COMPAT}.{module_name}")
    for attribute in attributes:
      setattr(package, attribute, _Missing(
          f"tensorflow_privacy.{module_name}.{attribute} is not mapped by "
          f"tf_dp.compat (docs/guides/migrating_from_tf_privacy.md, Not mapped)"))
      lent.append((package, attribute, None))
  estimator = _lend_estimator()
  try:
    return _exec_module(wheel, name)
  finally:
    sys.meta_path.remove(finder)
    for package, attribute, helper in lent:
      delattr(package, attribute)
      if helper:
        imported.append(helper)
    for alias in imported + estimator + [name]:
      sys.modules.pop(alias, None)
