"""``DPOptimizer`` for Keras 2 (``tf_keras``, or ``tf.keras`` on TF 2.15)."""

from typing import Any, Dict, List, NoReturn, Optional, Sequence

import tensorflow as tf

from tf_dp.core import config as config_lib
from tf_dp.keras import dp_engine
from tf_dp.keras import optimizer_base
from tf_dp.keras import optimizer_state
from tf_dp.keras.backend import keras2

_keras: Any = keras2.module()


class _CallableList(list):
  """A list that is also callable: Keras 2 reads both ``opt.variables`` and
  ``opt.variables()``."""

  def __call__(self) -> "_CallableList":
    return self


@_keras.utils.register_keras_serializable(package="tf_dp")
class DPOptimizerKeras2(optimizer_base.DPOptimizerMixin,
                        _keras.optimizers.Optimizer):
  """A Keras 2 optimizer that applies DP-SGD around ``inner_optimizer``.

  Build it with ``tf_dp.DPOptimizer``; see there for the privacy contract.
  ``inner_optimizer`` may be a current or a legacy Keras 2 optimizer.
  It is registered as ``"tf_dp>DPOptimizerKeras2"``, so
  ``keras.models.load_model`` finds it without ``custom_objects``.
  """

  def __init__(self, inner_optimizer: Any, dp_config: config_lib.DPConfig,
               name: Optional[str] = None) -> None:
    # Legacy optimizers keep their name in ``_name`` only.
    inner_name = getattr(inner_optimizer, "name", None) or getattr(
        inner_optimizer, "_name", "optimizer")
    super().__init__(name=name or f"dp_{inner_name}")
    self.inner_optimizer = inner_optimizer
    self.dp_config = dp_config
    self.dp_engine = dp_engine.DPEngine(dp_config)
    # Tracked here too: Keras 2's SavedModel revives every optimizer with an
    # ``_iterations`` variable and fails to load if one has none.
    self._iterations = inner_optimizer.iterations

  def build(self, var_list: Sequence[Any]) -> None:
    super().build(var_list)
    if hasattr(self.inner_optimizer, "_create_all_weights"):  # legacy
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

  @property
  def variables(self) -> List[Any]:
    """The wrapped optimizer's variables, then the ledger and open lot as
    named arrays: what the ``.h5`` format saves (``set_weights`` reverses
    it)."""
    variables = self._keras_variables()
    if tf.executing_eagerly():  # The arrays are read eagerly.
      variables += [
          optimizer_state.SavedArray(f"{optimizer_state.PREFIX}{key}", value)
          for key, value in self.dp_state().items()]
    return _CallableList(variables)

  def set_weights(self, weights: Sequence[Any]) -> None:
    """Loads ``variables`` values (the ``.h5`` format's optimizer weights):
    the wrapped optimizer's first, then the ledger and open lot."""
    count = len(self._keras_variables())
    for variable, value in zip(self._keras_variables(), weights):
      if tuple(variable.shape) != tuple(value.shape):
        raise ValueError(
            f"Optimizer variable {variable.name} has shape {variable.shape}; "
            f"the saved value has shape {value.shape}.")
    saved = list(weights[count:])
    self._load_saved(list(weights[:count]), dict(
        zip(optimizer_state.LEDGER_KEYS, saved)))

  def minimize(self, loss: Any, var_list: Sequence[Any],
               tape: Any = None) -> NoReturn:
    raise RuntimeError(
        optimizer_base.summed_gradients_error(self.dp_config.caller))

  def apply_gradients(self, grads_and_vars: Any, *args: Any,
                      **kwargs: Any) -> NoReturn:
    raise RuntimeError(
        optimizer_base.summed_gradients_error(self.dp_config.caller))

  def apply_private_gradients(self, grads: Sequence[Any],
                              trainable_variables: Sequence[Any]) -> None:
    """Applies already clipped and noised mean gradients (internal)."""
    grads_and_vars = list(zip(grads, trainable_variables))
    if hasattr(self.inner_optimizer, "_create_all_weights"):  # legacy
      self.inner_optimizer.apply_gradients(
          grads_and_vars, experimental_aggregate_gradients=False)
    else:
      self.inner_optimizer.apply_gradients(
          grads_and_vars, skip_gradients_aggregation=True)

  def get_config(self) -> Dict[str, Any]:
    return dict(self._config_dict(),
                inner_optimizer=_keras.optimizers.serialize(
                    self.inner_optimizer))

  @classmethod
  def from_config(cls, config: Dict[str, Any],
                  custom_objects: Any = None) -> "DPOptimizerKeras2":
    inner = _keras.optimizers.deserialize(config["inner_optimizer"],
                                          custom_objects=custom_objects)
    return cls._from_config_dict(inner, config)

