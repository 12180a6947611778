"""The Keras 2 side of tf_dp's Keras 2 classes (``tf_dp.keras.flavor_classes``):
the optimizer that wraps another (current or legacy), the layer base, and
registration under tf_dp's saved names. Every Keras 2 private API those
classes need is used here; they know nothing of DP."""

from typing import Any, List, Sequence, TypeVar

from tf_dp.keras.backend import keras2

_keras: Any = keras2.module()

Layer: Any = _keras.layers.Layer

_Class = TypeVar("_Class", bound=type)


def register_optimizer(cls: _Class) -> _Class:
  """Registers ``cls`` as ``"tf_dp>{cls.__name__}"``; Keras 2's loader finds
  it by that name once it is imported, else by the module a file
  records."""
  return _keras.utils.register_keras_serializable(package="tf_dp")(cls)


def register_layer(cls: _Class) -> _Class:
  """Registers a layer as ``"tf_dp>{cls.__name__}"`` where Keras 2 is the
  ``keras`` package (TF 2.15); tf-keras saves it under its class name (the
  names saved files have always had)."""
  if not _keras.__name__.startswith("tf_keras"):
    _keras.utils.register_keras_serializable(package="tf_dp")(cls)
  return cls


def optimizer_name(optimizer: Any) -> str:
  """The name of a Keras 2 optimizer (legacy ones keep it in ``_name``
  only)."""
  name = getattr(optimizer, "name", None) or getattr(
      optimizer, "_name", "optimizer")
  return str(name)


def _is_legacy(optimizer: Any) -> bool:
  return hasattr(optimizer, "_create_all_weights")


class CallableList(list):
  """A list that is also callable: Keras 2 reads both ``opt.variables`` and
  ``opt.variables()``."""

  def __call__(self) -> "CallableList":
    return self


class WrappingOptimizer(_keras.optimizers.Optimizer):
  """A Keras 2 optimizer that applies gradients with ``inner_optimizer``, a
  current or a legacy Keras 2 optimizer, which owns the step counter and
  the slots, and is saved inside this one's config."""

  def __init__(self, inner_optimizer: Any, name: str) -> None:
    super().__init__(name=name)
    self.inner_optimizer = inner_optimizer
    # Tracked here too: Keras 2's SavedModel revives every optimizer with an
    # ``_iterations`` variable and fails to load if one has none.
    self._iterations = inner_optimizer.iterations

  def build(self, var_list: Sequence[Any]) -> None:
    super().build(var_list)
    if _is_legacy(self.inner_optimizer):
      self.inner_optimizer._create_all_weights(var_list)  # pylint: disable=protected-access
    else:
      self.inner_optimizer.build(var_list)

  @property
  def iterations(self) -> Any:
    return self.inner_optimizer.iterations

  @iterations.setter
  def iterations(self, variable: Any) -> None:
    pass  # The wrapped optimizer owns the step counter.

  def _create_iteration_variable(self) -> None:
    self._iterations = None

  def _keras_variables(self) -> List[Any]:
    """The variables Keras itself saves: this optimizer's and the wrapped
    one's (step counter, slots; ``variables()`` on a legacy optimizer)."""
    inner = self.inner_optimizer.variables
    return list(self._variables) + list(inner() if callable(inner) else inner)

  def apply_with_inner(self, grads: Sequence[Any],
                       trainable_variables: Sequence[Any]) -> None:
    """Applies ``grads`` with the wrapped optimizer, without aggregating
    them over replicas."""
    grads_and_vars = list(zip(grads, trainable_variables))
    if _is_legacy(self.inner_optimizer):
      self.inner_optimizer.apply_gradients(
          grads_and_vars, experimental_aggregate_gradients=False)
    else:
      self.inner_optimizer.apply_gradients(
          grads_and_vars, skip_gradients_aggregation=True)

  def inner_config(self) -> Any:
    """The wrapped optimizer, serialised for this one's config."""
    return _keras.optimizers.serialize(self.inner_optimizer)

  @staticmethod
  def inner_from_config(config: Any, custom_objects: Any = None) -> Any:
    """Reverses ``inner_config``."""
    return _keras.optimizers.deserialize(config,
                                         custom_objects=custom_objects)
