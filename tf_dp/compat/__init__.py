"""Migration paths from other DP libraries onto tf_dp's own API.

``tf_dp.compat.tensorflow_privacy`` keeps the names and signatures of
TensorFlow Privacy (which no longer installs on current TensorFlow) and maps
each onto tf_dp. Nothing is imported until a name is used.
"""

import importlib

_LAZY_NAMES = {"tensorflow_privacy": "tf_dp.compat.tensorflow_privacy"}


def __getattr__(name):
  if name not in _LAZY_NAMES:
    raise AttributeError(f"module 'tf_dp.compat' has no attribute {name!r}")
  module = importlib.import_module(_LAZY_NAMES[name])
  globals()[name] = module
  return module
