"""``DPOptimizer`` for Keras 2 (``tf_keras``, or ``tf.keras`` on TF 2.15)."""

import tensorflow as tf

from tf_dp.keras import compat
from tf_dp.keras import config as config_lib
from tf_dp.keras import dp_engine
from tf_dp.keras import optimizer as optimizer_lib

_keras = compat.keras2()


class DPOptimizerKeras2(optimizer_lib.DPOptimizerMixin,
                        _keras.optimizers.Optimizer):
  """A Keras 2 optimizer that applies DP-SGD around ``inner_optimizer``.

  Build it with ``tf_dp.DPOptimizer``; see there for the privacy contract.
  ``inner_optimizer`` may be a current or a legacy Keras 2 optimizer.
  """

  def __init__(self, inner_optimizer, dp_config, name=None):
    super().__init__(name=name or f"dp_{inner_optimizer.name}")
    self.inner_optimizer = inner_optimizer
    self.dp_config = dp_config
    self.dp_engine = dp_engine.DPEngine(dp_config)

  def build(self, var_list):
    super().build(var_list)
    if hasattr(self.inner_optimizer, "_create_all_weights"):  # legacy
      self.inner_optimizer._create_all_weights(var_list)  # pylint: disable=protected-access
    else:
      self.inner_optimizer.build(var_list)

  @property
  def iterations(self):
    return self.inner_optimizer.iterations

  @iterations.setter
  def iterations(self, variable):
    pass  # The wrapped optimizer owns the step counter.

  def _create_iteration_variable(self):
    self._iterations = None

  def minimize(self, loss, var_list, tape=None):
    raise RuntimeError(optimizer_lib.SUMMED_GRADIENTS_ERROR)

  def apply_gradients(self, grads_and_vars, *args, **kwargs):
    raise RuntimeError(optimizer_lib.SUMMED_GRADIENTS_ERROR)

  def apply_private_gradients(self, grads, trainable_variables):
    """Applies already clipped and noised mean gradients (internal)."""
    grads_and_vars = list(zip(grads, trainable_variables))
    if hasattr(self.inner_optimizer, "_create_all_weights"):  # legacy
      self.inner_optimizer.apply_gradients(
          grads_and_vars, experimental_aggregate_gradients=False)
    else:
      self.inner_optimizer.apply_gradients(
          grads_and_vars, skip_gradients_aggregation=True)

  def get_config(self):
    return {"name": self.name,
            "inner_optimizer": _keras.optimizers.serialize(
                self.inner_optimizer),
            "dp_config": self.dp_config.to_dict()}

  @classmethod
  def from_config(cls, config, custom_objects=None):
    inner = _keras.optimizers.deserialize(config["inner_optimizer"],
                                          custom_objects=custom_objects)
    return cls(inner, config_lib.DPConfig(**config["dp_config"]),
               name=config.get("name"))


del tf
