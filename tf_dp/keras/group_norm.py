"""``with_group_normalization``: a copy of a model whose BatchNormalization
layers are GroupNormalization, which normalises each example with its own
statistics (and trains on tf_dp's fast path)."""

from typing import Any, Dict, List, Optional, Tuple

from tf_dp.keras import backend


def _groups(channels: int, groups: Optional[int]) -> int:
  if groups is not None:
    if channels % groups:
      raise ValueError(f"groups={groups} does not divide the {channels} "
                       f"channels of a BatchNormalization layer; pass a "
                       f"divisor of {channels}, or groups=None.")
    return groups
  return max(g for g in range(1, min(32, channels) + 1) if channels % g == 0)


def with_group_normalization(model: Any,
                             groups: Optional[int] = None) -> Any:
  """A clone of ``model`` with every BatchNormalization (and subclass) as a
  ``GroupNormalization``; the other layers' weights are copied.

  Privacy contract: GroupNormalization computes each example's statistics
  from that example alone, so per-example clipping bounds what one example
  contributes; the clone trains with ``make_private`` on the fast path.
  Each replacement keeps its layer's name, axis, epsilon, ``center`` and
  ``scale``, and starts from its gamma and beta (moving statistics have no
  counterpart).

  Args:
    model: A Sequential or Functional Keras model, built (Keras 3 clones
      nested models too).
    groups: Groups of every replacement; None takes, per layer, the largest
      divisor of its channels up to 32 (Keras's default).

  Returns:
    A new model (``model`` is unchanged); compile it (and ``make_private``
    it) as the original.

  Raises:
    ValueError: if ``groups`` does not divide a layer's channels, naming it.

  Example:
    >>> model = tf_dp.keras.make_private(
    ...     tf_dp.keras.with_group_normalization(model))
  """
  keras_backend = backend.for_object(model)
  batch_norms = keras_backend.batch_norm_classes()
  replaced: Dict[int, Any] = {}
  clones: List[Tuple[Any, Any]] = []

  def clone_function(layer: Any) -> Any:
    if isinstance(layer, batch_norms):
      axis = layer.axis if isinstance(layer.axis, int) else layer.axis[0]
      channels = int(layer.gamma.shape[0] if layer.scale
                     else layer.moving_mean.shape[0])
      try:
        count = _groups(channels, groups)
      except ValueError as e:
        raise ValueError(f"Layer {layer.name!r}: {e}") from e
      new = keras_backend.group_normalization(
          groups=count, axis=axis, epsilon=layer.epsilon, center=layer.center,
          scale=layer.scale, name=layer.name)
      replaced[id(new)] = layer
    else:
      new = layer.__class__.from_config(layer.get_config())
    clones.append((layer, new))
    return new

  clone = keras_backend.clone_model(model, clone_function, replaced)
  for original, new in clones:
    if id(new) in replaced:
      new.set_weights([getattr(original, name).numpy() for name, kept in (
          ("gamma", original.scale), ("beta", original.center)) if kept])
    elif original.weights:
      new.set_weights(original.get_weights())
  return clone
