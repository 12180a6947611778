"""The Keras 3 side of tf_dp's Keras 3 classes (``tf_dp.keras.flavor_classes``):
the optimizer that wraps another, the layer base, and registration under
tf_dp's saved names. Every Keras 3 private API those classes need is used
here; they know nothing of DP."""

from typing import Any, List, Sequence, TypeVar

import keras
import tensorflow as tf

Layer: Any = keras.layers.Layer

_Class = TypeVar("_Class", bound=type)


def register_optimizer(cls: _Class) -> _Class:
  """Registers ``cls`` as ``"tf_dp>{cls.__name__}"``, the name Keras 3's
  loader finds it by."""
  return keras.saving.register_keras_serializable(package="tf_dp")(cls)


register_layer = register_optimizer


def optimizer_name(optimizer: Any) -> str:
  """The name of a Keras 3 optimizer."""
  return optimizer.name


class WrappingOptimizer(keras.optimizers.Optimizer):
  """A Keras 3 optimizer that applies gradients with ``inner_optimizer``:
  the wrapped optimizer owns the step counter and the slots, and is saved
  inside this one's config."""

  def __init__(self, inner_optimizer: Any, name: str) -> None:
    super().__init__(learning_rate=0.0, name=name)
    self.inner_optimizer = inner_optimizer

  def build(self, var_list: Sequence[Any]) -> None:
    self.inner_optimizer.build(var_list)
    super().build(var_list)

  @property
  def variables(self) -> List[Any]:
    return self._variables + self.inner_optimizer.variables

  def _keras_variables(self) -> List[Any]:
    """The variables Keras itself saves: this optimizer's and the wrapped
    one's (step counter, slots)."""
    return list(self._variables) + list(self.inner_optimizer.variables)

  @property
  def iterations(self) -> Any:
    return self.inner_optimizer.iterations

  def apply_with_inner(self, grads: Sequence[Any],
                       trainable_variables: Sequence[Any]) -> None:
    """Applies ``grads``, the same global mean on every replica, with the
    wrapped optimizer. Keras 3 sums gradients over replicas before
    applying, so each replica passes mean / replicas."""
    replicas = tf.distribute.get_strategy().num_replicas_in_sync
    if tf.distribute.get_replica_context() is not None and replicas > 1:
      grads = [None if g is None else g / replicas for g in grads]
    self.inner_optimizer.apply(grads, trainable_variables)

  def finalize_variable_values(self, var_list: Sequence[Any]) -> None:
    self.inner_optimizer.finalize_variable_values(var_list)

  def inner_config(self) -> Any:
    """The wrapped optimizer, serialised for this one's config."""
    return keras.saving.serialize_keras_object(self.inner_optimizer)

  @staticmethod
  def inner_from_config(config: Any, custom_objects: Any = None) -> Any:
    """Reverses ``inner_config``."""
    return keras.saving.deserialize_keras_object(
        config, custom_objects=custom_objects)

