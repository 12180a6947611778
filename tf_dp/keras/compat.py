"""Which Keras is which: Keras 3 (``keras`` >= 3, ``tf.keras`` on TF >= 2.16)
and Keras 2 (``tf_keras``, or ``keras`` 2.x / ``tf.keras`` on TF 2.15).

Nothing is imported at module load; each helper imports what it needs.
"""

import importlib


def keras3():
  """The Keras 3 module, or None if the installed ``keras`` is Keras 2."""
  try:
    keras = importlib.import_module("keras")
  except ImportError:
    return None
  return keras if str(getattr(keras, "__version__", "2")).startswith("3") else (
      None)


def keras2():
  """The Keras 2 module: ``tf_keras`` if installed, else ``keras`` 2.x."""
  try:
    return importlib.import_module("tf_keras")
  except ImportError:
    pass
  if keras3() is None:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    return tf.keras
  return None


def flavor_of(obj):
  """``"keras3"`` or ``"keras2"`` for a Keras model, layer or optimizer."""
  module = type(obj).__module__
  for cls in type(obj).__mro__:
    module = cls.__module__
    if module.startswith("tf_keras"):
      return "keras2"
    if module.startswith("keras"):
      return "keras3" if keras3() is not None else "keras2"
  raise TypeError(f"{obj!r} is not a Keras object.")


def module_for(flavor):
  module = keras3() if flavor == "keras3" else keras2()
  if module is None:
    raise ImportError(f"No {flavor} installation found.")
  return module
