"""``DPOptimizer``: DP-SGD for any Keras optimizer, on Keras 3 and Keras 2.

Usage (two extra lines against non-private training)::

  model = tf_dp.keras.make_private(model)
  model.compile(optimizer=tf_dp.DPOptimizer(
                    keras.optimizers.SGD(0.1), l2_norm_clip=1.0,
                    noise_multiplier=1.1, population_size=len(x_train)),
                loss=keras.losses.SparseCategoricalCrossentropy(
                    from_logits=True),
                metrics=["accuracy"])
  model.fit(x_train, y_train, batch_size=256, epochs=5)
  eps = tf_dp.analysis.compute_epsilon_from_ledger(
      model.optimizer.ledger, delta=1e-5)
"""

import dataclasses
import warnings

import tensorflow as tf

from tf_dp.keras import compat
from tf_dp.keras import config as config_lib
from tf_dp.keras import dp_step
from tf_dp.keras import losses as losses_lib
from tf_dp.keras import optimizer_state


def _resolve_inner(optimizer):
  if isinstance(optimizer, str):
    keras = compat.keras3() or compat.keras2()
    return keras.optimizers.get(optimizer)
  return optimizer


def DPOptimizer(optimizer, l2_norm_clip=None, noise_multiplier=None,  # pylint: disable=invalid-name
                num_microbatches=None, gradient_accumulation_steps=1,
                dp_query=None, ledger=None, population_size=None,
                sampling="shuffled", sampling_probability=None,
                clipping="flat", noise_allocation="proportional",
                max_lots=100000, per_example_method="auto",
                metrics_noise_stddev=None, secure_mode=False, name=None):
  """Wraps a Keras optimizer so that it trains with DP-SGD.

  Privacy contract: for each record (one example, or one microbatch of
  ``batch_size / num_microbatches`` examples) the gradient of its mean loss
  is clipped to ``l2_norm_clip`` (by the ``DPQuery``); the clipped gradients
  of a lot (``gradient_accumulation_steps`` batches) are summed and
  N(0, (noise_multiplier * l2_norm_clip)^2 I) is added **once per lot**; the
  sum is divided by the lot's number of records (fixed-size sampling) or by
  its expected number ``q * n`` (Poisson); regularisation losses, which do not
  depend on the data, are added outside the clipped sum; the wrapped
  optimizer applies the result. The ledger records one sample per lot:
  ``(n, q, sampling, examples_per_record)`` and every Gaussian sum query.

  Args:
    optimizer: A Keras optimizer (Keras 3 or Keras 2; any algorithm) or its
      name. Its flavour selects the flavour of the returned optimizer.
    l2_norm_clip: Clip norm C (total over all variables).
    noise_multiplier: z; the noise stddev is z * C.
    num_microbatches: None (each example is a record) or M, the number of
      microbatches per batch (the batch size must be a multiple of M).
    gradient_accumulation_steps: Batches per lot (noise once per lot).
    dp_query: A custom ``tf_dp.DPQuery`` whose noised result is the SUM of
      the lot's records (e.g. ``tf_dp.build_query(...)``, a joint-clipping or
      adaptive-clipping query). Replaces l2_norm_clip and noise_multiplier.
    ledger: A ``tf_dp.PrivacyLedger``; by default one is created from
      ``population_size`` and ``sampling``. Read it as ``.ledger``.
    population_size: Number of training examples n (required without a
      ledger).
    sampling: ``"shuffled"`` (default: Keras ``fit`` on arrays or a
      shuffled dataset; accounted as fixed-size sampling without
      replacement, the conventional approximation, with a warning from the
      accountant), ``"fixed_size"`` (lots from
      ``tf_dp.data.fixed_size_sampled_batches``: independent uniform subsets,
      replace-one neighbours) or ``"poisson"`` (lots from
      ``tf_dp.data.poisson_sampled_batches``; add/remove neighbours). The
      last two are guarantees.
    sampling_probability: q for ``"poisson"``: the probability that an
      example is in a lot (of ``gradient_accumulation_steps`` batches).
    clipping, noise_allocation: Strategies of McMahan & Andrew (2018) when no
      dp_query is given: ``"flat"``, ``"per_layer"`` or
      ``"dimension_adjusted"``; ``"proportional"`` or
      ``"dimensionality_adjusted"``.
    max_lots: Ledger capacity (number of lots in the whole run).
    per_example_method: ``"auto"`` (default): per-record norms from one
      batched pass with ghost norms and per-layer rules
      (``tf_dp.keras.fast``) when the model and query allow it, otherwise
      per-example gradients with ``tf.vectorized_map`` (logged with the
      reason); ``"fast"`` (error if unavailable); ``"vectorized"``. All give
      the same clipped sum (to float rounding).
    metrics_noise_stddev: If set, training accuracy is also estimated
      privately: each example contributes (1, correct, one-hot label), a
      vector of norm <= sqrt(3), and N(0, metrics_noise_stddev^2) is added to
      the counts once per lot, in the same ledger sample. ``fit`` then logs
      ``dp_accuracy`` (computed from the noised counts of the last lot).
    secure_mode: Draw the noise from the operating system's cryptographic
      generator with a floating-point hardened Gaussian sampler
      (``tf_dp.dp_query.noise``): slower, and not available under XLA. In
      both modes the noise key never leaves the process.
    name: Optional name.

  Returns:
    A Keras 3 or Keras 2 optimizer, matching ``optimizer``.

  Raises:
    ValueError: on invalid arguments, naming the argument.
  """
  inner = _resolve_inner(optimizer)
  cfg = config_lib.DPConfig(
      l2_norm_clip=l2_norm_clip, noise_multiplier=noise_multiplier,
      num_microbatches=num_microbatches,
      gradient_accumulation_steps=gradient_accumulation_steps,
      dp_query=dp_query, ledger=ledger, population_size=population_size,
      sampling=sampling, sampling_probability=sampling_probability,
      clipping=clipping, noise_allocation=noise_allocation,
      max_lots=max_lots, per_example_method=per_example_method,
      metrics_noise_stddev=metrics_noise_stddev, secure_mode=secure_mode)
  flavor = compat.flavor_of(inner)
  if flavor == "keras3":
    from tf_dp.keras import optimizer_keras3  # pylint: disable=g-import-not-at-top
    return optimizer_keras3.DPOptimizerKeras3(inner, cfg, name=name)
  from tf_dp.keras import optimizer_keras2  # pylint: disable=g-import-not-at-top
  return optimizer_keras2.DPOptimizerKeras2(inner, cfg, name=name)


SUMMED_GRADIENTS_ERROR = (
    "tf_dp.DPOptimizer received gradients that Keras already summed over the "
    "batch, so per-example clipping is impossible and training would not be "
    "private. Convert the model before compiling it: "
    "`model = tf_dp.keras.make_private(model)`.")


def is_dp_optimizer(optimizer):
  return hasattr(optimizer, "dp_engine") and hasattr(
      optimizer, "apply_private_gradients")


class DPOptimizerMixin:
  """What both Keras flavours' DP optimizers share: delegation to the
  wrapped optimizer, building the DP state with the model, and saving the
  ledger and the open lot with the model (see ``optimizer_state``)."""

  @property
  def ledger(self):
    return self.dp_engine.ledger

  @tf.autograph.experimental.do_not_convert
  def private_step(self, model, loss, x, y, sample_weight=None):
    """One DP-SGD step for a custom training loop: the step ``fit`` takes.

    Privacy contract: as ``tf_dp.DPOptimizer``. Each record's gradient of
    ``loss`` (evaluated on each example alone) is clipped, the batch is
    added to the lot, and on the lot's last batch the sum is noised once,
    one ledger sample is recorded and the mean is applied to
    ``model.trainable_variables``. Regularisers and ``add_loss`` terms
    that do not depend on the data are added outside the clipped sum.
    Call it inside or outside a ``tf.function``.

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
    flavor = dp_step.converted_flavor(model)
    if flavor is None:
      raise ValueError(
          "private_step needs a model converted with "
          "`model = tf_dp.keras.make_private(model)` (it refuses layers "
          "that mix examples and draws per-example dropout masks).")
    loss_fn = losses_lib.per_example_loss_from(loss, flavor)
    _, losses, _ = dp_step.private_step(model, self, loss_fn, x, y,
                                        sample_weight)
    return losses

  @property
  def learning_rate(self):
    return self.inner_optimizer.learning_rate

  @learning_rate.setter
  def learning_rate(self, learning_rate):
    self.inner_optimizer.learning_rate = learning_rate

  def ensure_built(self, var_list, model):
    """Builds the DP state (which needs the model: DP batch norm, metrics)
    and the wrapped optimizer, once; restores a loaded ledger and lot.

    Raises:
      ValueError: if the optimizer has applied more lots than its ledger
        records (a ledger that was not restored with the model).
    """
    if not self.dp_engine.built:
      self.dp_engine.build(var_list, model)
      self.build(var_list)
    self._restore_pending_dp_state()
    optimizer_state.check_ledger_covers(self._lots_applied(), self.ledger)

  def _lots_applied(self):
    """Lots applied so far: the wrapped optimizer's step counter (one step
    per lot), or the count saved in the config if that is larger (a format
    that drops optimizer state, e.g. Keras 2's SavedModel)."""
    applied = int(optimizer_state.numpy(self.iterations))
    return max(applied, getattr(self, "_lots_applied_at_save", 0))

  def _config_dict(self):
    """``get_config``'s common part: the DP config and the lots applied."""
    cfg = self.dp_config
    if cfg.ledger is not None:  # The ledger is saved with the state.
      cfg = dataclasses.replace(cfg, ledger=None,
                                max_lots=cfg.ledger.max_samples)
    config = {"name": self.name, "dp_config": cfg.to_dict()}
    if tf.executing_eagerly():
      config["lots_applied"] = self._lots_applied()
    return config

  @classmethod
  def _from_config_dict(cls, inner, config):
    optimizer = cls(inner, config_lib.DPConfig(**config["dp_config"]),
                    name=config.get("name"))
    # pylint: disable-next=protected-access
    optimizer._lots_applied_at_save = int(config.get("lots_applied", 0))
    return optimizer

  def _keras_variables(self):
    """The variables Keras itself saves: this optimizer's and the wrapped
    one's (step counter, slots)."""
    inner = self.inner_optimizer.variables
    return list(self._variables) + list(inner() if callable(inner) else inner)

  def dp_state(self):
    """The ledger and open lot, as ``{name: numpy array}`` (eager only)."""
    return optimizer_state.export_state(self.dp_engine)

  def load_dp_state(self, state):
    """Restores ``dp_state()`` output now, or when the DP state is built."""
    self._load_saved(None, state)

  def _load_saved(self, keras_values, state):
    """Assigns saved values of ``_keras_variables()`` (if not None) and the
    DP state; what cannot be assigned yet waits for ``ensure_built``."""
    self._pending_dp_state = optimizer_state.PendingState(state, keras_values)
    self._restore_pending_dp_state()

  def _restore_pending_dp_state(self):
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
      return  # Until the model's first step builds the engine.
    if pending.keras_values is not None:
      warnings.warn(
          f"The saved state of optimizer {self.name!r} has "
          f"{len(pending.keras_values)} variables but this one has "
          f"{len(variables)}: the wrapped optimizer starts afresh (step "
          f"counter, slots); its privacy ledger is kept.", UserWarning)
    if pending.state:
      optimizer_state.restore_state(self.dp_engine, pending.state)
    self._pending_dp_state = None

  def save_own_variables(self, store):
    """Keras variables under ``"0"``, ``"1"``, ...; the DP state under
    ``"tf_dp_*"`` names (the ``.keras`` format and ``save_weights``)."""
    for i, variable in enumerate(self._keras_variables()):
      store[str(i)] = variable.numpy()
    for key, value in self.dp_state().items():
      store[optimizer_state.PREFIX + key] = value

  def load_own_variables(self, store):
    """Reverses ``save_own_variables``; an optimizer not built yet gets its
    values when the model's first step builds it."""
    prefix = optimizer_state.PREFIX
    keys = list(store.keys())
    count = len([k for k in keys if not k.startswith(prefix)])
    self._load_saved(
        [store[str(i)] for i in range(count)],
        {k[len(prefix):]: store[k] for k in keys if k.startswith(prefix)})
