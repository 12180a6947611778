"""``DPOptimizer`` for Keras 3 (``keras`` >= 3, ``tf.keras`` on TF >= 2.16)."""

from typing import Any, NoReturn, Optional, Sequence

from tf_dp.core import config as config_lib
from tf_dp.keras import dp_engine
from tf_dp.keras import optimizer_base
from tf_dp.keras.backend import keras3_bases


@keras3_bases.register_optimizer
class DPOptimizerKeras3(optimizer_base.DPOptimizerMixin,
                        keras3_bases.WrappingOptimizer):
  """A Keras 3 optimizer that applies DP-SGD around ``inner_optimizer``.

  Build it with ``tf_dp.DPOptimizer``; see there for the privacy contract.
  It only accepts private gradients from a model converted with
  ``tf_dp.keras.make_private``; ``apply_gradients`` with summed gradients
  raises. It is registered as ``"tf_dp>DPOptimizerKeras3"``, so
  ``keras.models.load_model`` finds it without ``custom_objects``.
  """

  def __init__(self, inner_optimizer: Any, dp_config: config_lib.DPConfig,
               name: Optional[str] = None) -> None:
    super().__init__(inner_optimizer, name or
                     f"dp_{keras3_bases.optimizer_name(inner_optimizer)}")
    self.dp_config = dp_config
    self.dp_engine = dp_engine.DPEngine(dp_config)

  def apply(self, grads: Sequence[Any],
            trainable_variables: Any = None) -> NoReturn:
    raise RuntimeError(
        optimizer_base.summed_gradients_error(self.dp_config.caller))

