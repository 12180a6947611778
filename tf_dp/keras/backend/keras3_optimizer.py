"""``DPOptimizer`` for Keras 3 (``keras`` >= 3, ``tf.keras`` on TF >= 2.16)."""

from typing import Any, Dict, List, NoReturn, Optional, Sequence

import keras
import tensorflow as tf

from tf_dp.core import config as config_lib
from tf_dp.keras import dp_engine
from tf_dp.keras import optimizer_base


@keras.saving.register_keras_serializable(package="tf_dp")
class DPOptimizerKeras3(optimizer_base.DPOptimizerMixin,
                        keras.optimizers.Optimizer):
  """A Keras 3 optimizer that applies DP-SGD around ``inner_optimizer``.

  Build it with ``tf_dp.DPOptimizer``; see there for the privacy contract.
  It only accepts private gradients from a model converted with
  ``tf_dp.keras.make_private``; ``apply_gradients`` with summed gradients
  raises. It is registered as ``"tf_dp>DPOptimizerKeras3"``, so
  ``keras.models.load_model`` finds it without ``custom_objects``.
  """

  def __init__(self, inner_optimizer: Any, dp_config: config_lib.DPConfig,
               name: Optional[str] = None) -> None:
    super().__init__(learning_rate=0.0,
                     name=name or f"dp_{inner_optimizer.name}")
    self.inner_optimizer = inner_optimizer
    self.dp_config = dp_config
    self.dp_engine = dp_engine.DPEngine(dp_config)

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

  def apply(self, grads: Sequence[Any],
            trainable_variables: Any = None) -> NoReturn:
    raise RuntimeError(
        optimizer_base.summed_gradients_error(self.dp_config.caller))

  def apply_private_gradients(self, grads: Sequence[Any],
                              trainable_variables: Sequence[Any]) -> None:
    """Applies already clipped and noised mean gradients (internal).

    Every replica passes the same global mean; Keras 3 sums gradients over
    replicas before applying, so each passes mean / replicas.
    """
    replicas = tf.distribute.get_strategy().num_replicas_in_sync
    if tf.distribute.get_replica_context() is not None and replicas > 1:
      grads = [None if g is None else g / replicas for g in grads]
    self.inner_optimizer.apply(grads, trainable_variables)

  def finalize_variable_values(self, var_list: Sequence[Any]) -> None:
    self.inner_optimizer.finalize_variable_values(var_list)

  def get_config(self) -> Dict[str, Any]:
    return dict(self._config_dict(),
                inner_optimizer=keras.saving.serialize_keras_object(
                    self.inner_optimizer))

  @classmethod
  def from_config(cls, config: Dict[str, Any],
                  custom_objects: Any = None) -> "DPOptimizerKeras3":
    inner = keras.saving.deserialize_keras_object(
        config["inner_optimizer"], custom_objects=custom_objects)
    return cls._from_config_dict(inner, config)
