"""Migration paths from other DP libraries onto tf_dp's own API.

``tf_dp.compat.tensorflow_privacy`` keeps the names and signatures of
TensorFlow Privacy (which no longer installs on current TensorFlow) and maps
each onto tf_dp. Nothing is imported until a name is used.
"""

from tf_dp import _lazy_names

_LAZY_NAMES = {"tensorflow_privacy": "tf_dp.compat.tensorflow_privacy"}


__getattr__, __dir__ = _lazy_names(__name__, _LAZY_NAMES)
