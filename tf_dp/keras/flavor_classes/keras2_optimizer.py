"""``DPOptimizer`` for Keras 2 (``tf_keras``, or ``tf.keras`` on TF 2.15)."""

from typing import Any, List, NoReturn, Optional, Sequence

import tensorflow as tf

from tf_dp.core import config as config_lib
from tf_dp.keras import dp_engine
from tf_dp.keras import optimizer_base
from tf_dp.keras import optimizer_state
from tf_dp.keras.backend import keras2_bases


@keras2_bases.register_optimizer
class DPOptimizerKeras2(optimizer_base.DPOptimizerMixin,
                        keras2_bases.WrappingOptimizer):
  """A Keras 2 optimizer that applies DP-SGD around ``inner_optimizer``.

  Build it with ``tf_dp.DPOptimizer``; see there for the privacy contract.
  ``inner_optimizer`` may be a current or a legacy Keras 2 optimizer.
  It is registered as ``"tf_dp>DPOptimizerKeras2"``, so
  ``keras.models.load_model`` finds it without ``custom_objects``.
  """

  def __init__(self, inner_optimizer: Any, dp_config: config_lib.DPConfig,
               name: Optional[str] = None) -> None:
    super().__init__(inner_optimizer, name or
                     f"dp_{keras2_bases.optimizer_name(inner_optimizer)}")
    self.dp_config = dp_config
    self.dp_engine = dp_engine.DPEngine(dp_config)

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
    return keras2_bases.CallableList(variables)

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

