"""What the Keras 3 and Keras 2 DP optimizers share: the mixin that
delegates to the wrapped optimizer, builds the DP state with the model, runs
the custom-loop step, and saves the ledger with the model. The classes
themselves are in ``tf_dp.keras.flavor_classes`` (``keras3_optimizer``,
``keras2_optimizer``)."""

import dataclasses
from typing import (TYPE_CHECKING, Any, Dict, List, Mapping, Optional,
                    Sequence)
import warnings

import numpy as np
import tensorflow as tf

from tf_dp.core import caller_api
from tf_dp.core import config as config_lib
from tf_dp.errors import PrivacyError
from tf_dp.keras import dp_step
from tf_dp.keras import fit_correlated_noise
from tf_dp.keras import losses as losses_lib
from tf_dp.keras import optimizer_state
from tf_dp.privacy_ledger import PrivacyLedger

if TYPE_CHECKING:
  from tf_dp.keras import dp_engine as dp_engine_lib


def summed_gradients_error(caller: caller_api.CallerApi) -> str:
  """The refusal of gradients summed over the batch (an unconverted model),
  naming the optimizer as ``caller`` built it."""
  optimizer = ("tf_dp.DPOptimizer" if caller == caller_api.TF_DP
               else f"{caller.constructor} (a tf_dp.DPOptimizer)")
  fix = (f" {caller.unconverted_model_fix}" if caller.unconverted_model_fix
         else "")
  return (f"{optimizer} received gradients that Keras already summed over "
          f"the batch, so per-example clipping is impossible and training "
          f"would not be private. Convert the model before compiling it: "
          f"`model = tf_dp.keras.make_private(model)`.{fix}")


def is_dp_optimizer(optimizer: Any) -> bool:
  return hasattr(optimizer, "dp_engine") and hasattr(
      optimizer, "apply_private_gradients")


class DPOptimizerMixin:
  """What both Keras flavours' DP optimizers share: delegation to the
  wrapped optimizer, building the DP state with the model, and saving the
  ledger and the open lot with the model (see ``optimizer_state``)."""

  if TYPE_CHECKING:
    # Set by each flavour's class (``tf_dp.keras.flavor_classes``) or its
    # Keras optimizer base class (``WrappingOptimizer`` of the backend).
    dp_engine: "dp_engine_lib.DPEngine"
    dp_config: config_lib.DPConfig
    inner_optimizer: Any
    name: str
    _pending_dp_state: Optional[optimizer_state.PendingState]
    _lots_applied_at_save: int

    def __init__(self, *args: Any, **kwargs: Any) -> None: ...

    @property
    def iterations(self) -> Any: ...

    def build(self, var_list: Sequence[Any]) -> None: ...

    def _keras_variables(self) -> List[Any]:
      """The variables Keras itself saves: this optimizer's and the wrapped
      one's (step counter, slots)."""

    def apply_with_inner(self, grads: Sequence[Any],
                         trainable_variables: Sequence[Any]) -> None: ...

    def inner_config(self) -> Any: ...

    @staticmethod
    def inner_from_config(config: Any, custom_objects: Any = None) -> Any: ...

  @property
  def ledger(self) -> PrivacyLedger:
    """The ``PrivacyLedger`` of every lot this optimizer applied.

    Raises:
      IncompleteLedgerError: (eagerly) if the optimizer has applied more
        lots than the ledger records: a ledger not restored with the model
        (Keras 2's SavedModel drops it), whose epsilon would be too small.
    """
    ledger = self.dp_engine.ledger
    if tf.executing_eagerly():
      optimizer_state.check_ledger_covers(self._lots_applied(), ledger,
                                          reading=True)
    return ledger

  @tf.autograph.experimental.do_not_convert
  def private_step(self, model: Any, loss: Any, x: Any, y: Any,
                   sample_weight: Any = None) -> tf.Tensor:
    """One DP-SGD step for a custom training loop: the step ``fit`` takes.

    Privacy contract: as ``tf_dp.DPOptimizer``. Each record's gradient of
    ``loss`` (evaluated on each example alone) is clipped, the batch is
    added to the lot, and on the lot's last batch the sum is noised once,
    one ledger sample is recorded and the mean is applied to
    ``model.trainable_variables``. Regularisers and ``add_loss`` terms
    that do not depend on the data are added outside the clipped sum.
    Call it inside or outside a ``tf.function``; inside one, its first
    trace creates the DP state eagerly and outside the function's variable
    capture, so the function is traced once. Unlike ``fit``, a custom
    loop's batches are not checked against the declared ``sampling``: with
    ``"poisson"`` or ``"fixed_size"`` the caller must feed the lots of the
    matching ``tf_dp.data`` sampler (or of a sampler of its own that draws
    them that way), or the ledger's epsilon does not hold.

    Args:
      model: A Keras model converted with ``tf_dp.keras.make_private``.
      loss: A Keras loss (name or object) or a function ``(y_true,
        y_pred) -> loss``.
      x, y: The batch.
      sample_weight: Optional ``[batch]`` weights.

    Returns:
      The ``[batch]`` per-example (weighted) losses.

    Raises:
      ValueError: if ``model`` was not converted with ``make_private``.

    Example:
      >>> model = tf_dp.keras.make_private(model)
      >>> opt = tf_dp.DPOptimizer(keras.optimizers.SGD(0.1), 1.0, 1.1,
      ...                         population_size=len(x_train))
      >>> @tf.function
      ... def train_step(x, y):
      ...   return opt.private_step(model, "sparse_categorical_crossentropy",
      ...                           x, y)
    """
    keras_backend = dp_step.converted_backend(model)
    if keras_backend is None:
      raise PrivacyError(
          "private_step needs a model converted with "
          "`model = tf_dp.keras.make_private(model)` (it refuses layers "
          "that mix examples and draws per-example dropout masks).")
    if tf.executing_eagerly():
      # Traced steps are refused by the correlated-noise record instead.
      fit_correlated_noise.check_step_outside_fit(self.dp_engine,
                                                  "private_step")
    loss_fn = losses_lib.per_example_loss_from(loss, keras_backend)
    _, losses, _ = dp_step.private_step(model, self, loss_fn, x, y,
                                        sample_weight)
    return losses

  @property
  def learning_rate(self) -> Any:
    return self.inner_optimizer.learning_rate

  @learning_rate.setter
  def learning_rate(self, learning_rate: Any) -> None:
    self.inner_optimizer.learning_rate = learning_rate

  def ensure_built(self, var_list: Sequence[Any], model: Any) -> None:
    """Builds the DP state (which needs the model: DP batch norm, metrics)
    and the wrapped optimizer, once; restores a loaded ledger and lot.

    Raises:
      ValueError: if the optimizer has applied more lots than its ledger
        records (a ledger that was not restored with the model), or a
        correlated-noise run's noise state was not kept with its ledger.
    """
    if not self.dp_engine.built:
      self.dp_engine.build(var_list, model)
      self.build(var_list)
    self._restore_pending_dp_state()
    self.dp_engine.apply_inferred_population_size()
    optimizer_state.check_ledger_covers(self._lots_applied(),
                                        self.dp_engine.ledger)
    self.dp_engine.check_noise_state_continues()

  def _lots_applied(self) -> int:
    """Lots applied so far: the wrapped optimizer's step counter (one step
    per lot), or the count saved in the config if that is larger (a format
    that drops optimizer state, e.g. Keras 2's SavedModel)."""
    applied = int(optimizer_state.numpy(self.iterations))
    return max(applied, getattr(self, "_lots_applied_at_save", 0))

  def apply_private_gradients(self, grads: Sequence[Any],
                              trainable_variables: Sequence[Any]) -> None:
    """Applies already clipped and noised mean gradients (internal)."""
    self.apply_with_inner(grads, trainable_variables)

  def get_config(self) -> Dict[str, Any]:
    return dict(self._config_dict(), inner_optimizer=self.inner_config())

  @classmethod
  def from_config(cls, config: Dict[str, Any],
                  custom_objects: Any = None) -> Any:
    inner = cls.inner_from_config(config["inner_optimizer"], custom_objects)
    return cls._from_config_dict(inner, config)

  def _config_dict(self) -> Dict[str, Any]:
    """``get_config``'s common part: the DP config and the lots applied."""
    cfg = self.dp_config
    if cfg.ledger is not None:  # The ledger is saved with the state.
      cfg = dataclasses.replace(cfg, ledger=None,
                                max_lots=cfg.ledger.max_samples)
    config: Dict[str, Any] = {"name": self.name, "dp_config": cfg.to_dict()}
    if tf.executing_eagerly():
      config["lots_applied"] = self._lots_applied()
    return config

  @classmethod
  def _from_config_dict(cls, inner: Any, config: Dict[str, Any]) -> Any:
    optimizer = cls(inner, config_lib.DPConfig(**config["dp_config"]),
                    name=config.get("name"))
    # pylint: disable-next=protected-access
    optimizer._lots_applied_at_save = int(config.get("lots_applied", 0))
    return optimizer

  def dp_state(self) -> Dict[str, np.ndarray]:
    """The ledger and open lot, as ``{name: numpy array}`` (eager only)."""
    return optimizer_state.export_state(self.dp_engine)

  def _load_saved(self, keras_values: Optional[Sequence[Any]],
                  state: Mapping[str, Any]) -> None:
    """Assigns saved values of ``_keras_variables()`` and the
    DP state; what cannot be assigned yet waits for ``ensure_built``."""
    self._pending_dp_state = optimizer_state.PendingState(state, keras_values)
    self._restore_pending_dp_state()

  def _restore_pending_dp_state(self) -> None:
    pending = getattr(self, "_pending_dp_state", None)
    if pending is None:
      return
    variables = self._keras_variables()
    if pending.keras_values is not None and (
        len(pending.keras_values) == len(variables)):
      for variable, value in zip(variables, pending.keras_values):
        variable.assign(value)
      pending.keras_values = None
    if not self.dp_engine.built:
      # The ledger is readable now (epsilon of a loaded model); the lot
      # state waits for the model's first step to build the engine, which
      # restores the ledger again (into the ledger it then uses).
      if pending.state:
        optimizer_state.restore_ledger(self.dp_engine.ledger, pending.state)
      return
    if pending.keras_values is not None:
      warnings.warn(
          f"The saved state of optimizer {self.name!r} has "
          f"{len(pending.keras_values)} variables but this one has "
          f"{len(variables)}: the wrapped optimizer starts afresh (step "
          f"counter, slots); its privacy ledger is kept.", UserWarning)
    if pending.state:
      optimizer_state.restore_state(self.dp_engine, pending.state)
    self._pending_dp_state = None

  def save_own_variables(self, store: Any) -> None:
    """Keras variables under ``"0"``, ``"1"``, ...; the DP state under
    ``"tf_dp_*"`` names (the ``.keras`` format and ``save_weights``)."""
    for i, variable in enumerate(self._keras_variables()):
      store[str(i)] = variable.numpy()
    for key, value in self.dp_state().items():
      store[optimizer_state.PREFIX + key] = value

  def load_own_variables(self, store: Any) -> None:
    """Reverses ``save_own_variables``; an optimizer not built yet gets its
    values when the model's first step builds it."""
    prefix = optimizer_state.PREFIX
    keys = list(store.keys())
    count = len([k for k in keys if not k.startswith(prefix)])
    self._load_saved(
        [store[str(i)] for i in range(count)],
        {k[len(prefix):]: store[k] for k in keys if k.startswith(prefix)})
