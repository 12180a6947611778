"""TF Privacy's ``layer_registry``: its default registry means tf_dp's rules.

TF Privacy clipped fast ("ghost clipping") only the layers of the registry
given to ``DPModel`` / ``DPSequential``; ``make_default_layer_registry()``
listed Dense, Embedding, LayerNormalization, EinsumDense and the like.
tf_dp always picks its fast per-layer rules itself (``tf_dp.keras.fast``,
falling back to exact per-example gradients for other layers), so the
default registry stands for that choice: passing it is the same as passing
None. A registry with layers of your own is refused (register their rules
with ``tf_dp.keras.fast`` instead).
"""


class LayerRegistry:
  """TF Privacy's registry, holding only tf_dp's default choice of fast
  rules; ``insert`` is refused (see the module docstring)."""

  def insert(self, layer_class, layer_registry_function):
    del layer_registry_function
    raise ValueError(
        f"tf_dp picks fast clipping rules itself; register a rule for "
        f"{getattr(layer_class, '__name__', layer_class)} with "
        f"tf_dp.keras.fast instead of a TF Privacy layer registry.")


def make_default_layer_registry():
  """The default registry: tf_dp's own fast rules (same as None)."""
  return LayerRegistry()
