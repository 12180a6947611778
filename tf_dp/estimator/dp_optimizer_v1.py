"""DP versions of the ``tf.compat.v1.train`` optimizers (graph mode).

Usage in an Estimator ``model_fn``::

  per_example_loss = tf.keras.losses.sparse_categorical_crossentropy(
      labels, logits, from_logits=True)            # shape [batch]
  optimizer = tf_dp.estimator.DPGradientDescentOptimizer(
      l2_norm_clip=1.0, noise_multiplier=1.1, population_size=60000,
      learning_rate=0.1)
  train_op = optimizer.minimize(per_example_loss,
                                global_step=tf.compat.v1.train.get_global_step())

The optimizer only sees the loss vector, so per-record gradients are
``tf.gradients`` of each record's loss, vectorised with
``tf.vectorized_map``: each record differentiates through the batch graph,
which costs O(batch^2) (the jacobian). It is the
path for existing Estimator pipelines; Keras training with
``tf_dp.keras.make_private`` is O(batch).

The DP step itself is the framework-neutral one of ``tf_dp.core``, shared
with Keras: the configuration (``DPConfig``), the clipped sum
(``tf_dp.core.vectorized.clipped_sum``) and the release of the lot (noise
once, one ledger sample, the denominator: ``tf_dp.core.lot.release``).
What is compat.v1-specific stays here: per-record gradients by
``tf.gradients``, the optimizer classes, and DP state kept per graph.

After training, ``tf_dp.estimator.ledger_from_checkpoint(model_dir)`` reads
the ledger, which lives in named variables saved in the checkpoint.
"""

from typing import Any, Dict

import tensorflow as tf

from tf_dp.core import caller_api
from tf_dp.core import config as config_lib
from tf_dp.core import lot as lot_lib
from tf_dp.core import vectorized
from tf_dp.estimator import record_independence
from tf_dp.privacy_ledger import QueryWithLedger
from tf_dp.sampling import Sampling

LEDGER_NAME = "tf_dp_privacy_ledger"

_v1: Any = tf.compat.v1


def _refuse_several_replicas():
  """Refuses a ``train_distribute`` strategy with several replicas.

  Each replica would clip, noise and record its part of the batch as a lot
  of its own: the ledger would compose R samples of q / R where the step
  is one sample of q (which understates epsilon), and the compat.v1
  optimizers sum the replicas' means.
  """
  strategy = tf.distribute.get_strategy()
  if tf.distribute.has_strategy() and strategy.num_replicas_in_sync > 1:
    raise ValueError(
        f"tf_dp's Estimator optimizers train on one replica; this "
        f"{type(strategy).__name__} has {strategy.num_replicas_in_sync}. Each "
        f"replica would noise and record its part of the batch as a lot of "
        f"its own, which understates epsilon. Train without "
        f"train_distribute (or with one device), or use the Keras path "
        f"(tf_dp.keras.make_private + tf_dp.DPOptimizer), which merges the "
        f"replicas' clipped sums and noises each global lot once.")


def _graph_only(caller, given):
  """The refusal of a loss callable or of eager execution: these optimizers
  differentiate each record's loss with ``tf.gradients`` in a graph."""
  return (
      f"{caller.constructor} computes each example's gradient with "
      f"tf.gradients of the per-example loss tensor in a graph (an Estimator "
      f"model_fn, or a tf.compat.v1 Session's graph); it was given {given}. "
      f"Pass minimize the loss tensor, shape [batch], of the graph being "
      f"built. In TF2 eager code use a Keras DP optimizer instead: "
      f"tf_dp.DPOptimizer with tf_dp.keras.make_private and model.fit, "
      f"DPOptimizer.private_step in a custom loop, or TF Privacy's "
      f"DPKerasSGDOptimizer from tf_dp.compat.tensorflow_privacy.")


class _DPMixin:
  """Clips per-record gradients, noises the sum once, records the ledger.

  Privacy contract: as ``tf_dp.DPOptimizer`` with one batch per lot: each
  record's gradient (one example, or the mean over a microbatch) is clipped
  to ``l2_norm_clip``; N(0, (noise_multiplier * l2_norm_clip)^2) is added once
  to the sum; the sum is divided by the number of records (fixed-size and
  shuffled batches) or by ``sampling_probability * population_size``
  (Poisson); one ledger sample is written per ``compute_gradients`` call.
  One replica only: a strategy with several replicas is refused. With
  ``self_check=True`` (the default) every step first checks that no
  example's loss reads another example of the batch
  (``tf_dp.estimator.record_independence``) and fails before any variable
  or ledger change if one does: every step, for a batch statistic; with
  probability at least 1/4 per step, for an example that reads a single
  other example.

  The keyword ``caller`` (a ``tf_dp.core.caller_api.CallerApi``) is the
  constructor refusals name: a wrapper's (``tf_dp.compat``'s TF Privacy
  names), by default this class.
  """

  def __init__(self, l2_norm_clip, noise_multiplier, population_size, *args,
               num_microbatches=None, dp_query=None,
               sampling=Sampling.FIXED_SIZE, sampling_probability=None,
               self_check=True, caller=None, **kwargs):
    super().__init__(*args, **kwargs)
    self._self_check = bool(self_check)
    # The constructor refusals name (a wrapper's, e.g. tf_dp.compat's).
    caller = caller or caller_api.CallerApi(type(self).__name__)
    if population_size is None:
      raise ValueError(
          f"population_size, the number of training examples, is required: "
          f"{caller.setting('population_size', 'len(x_train)')}. Every lot "
          f"records it in the ledger to account privacy, and an Estimator's "
          f"or a Session's input has no length to take it from.")
    if isinstance(dp_query, QueryWithLedger):
      raise ValueError(
          f"{caller.argument('dp_query')} is wrapped in a QueryWithLedger: "
          f"pass the query itself. The Estimator optimizer records its own "
          f"ledger in the graph (read it with "
          f"tf_dp.estimator.ledger_from_checkpoint).")
    self._dp_config = config_lib.DPConfig(
        l2_norm_clip=l2_norm_clip, noise_multiplier=noise_multiplier,
        num_microbatches=num_microbatches, dp_query=dp_query,
        population_size=population_size, sampling=sampling,
        sampling_probability=sampling_probability, caller=caller)
    self._graph_state = {}

  @property
  def dp_config(self):
    return self._dp_config

  def _state_for_graph(self, var_list):
    """The query, ledger, global state variables and gradient templates of
    the default graph (created there once: an Estimator builds a new graph
    for every ``train`` call, and the checkpoint carries the state over)."""
    graph = _v1.get_default_graph()
    if graph not in self._graph_state:
      cfg = self._dp_config
      templates = [tf.zeros(v.shape, v.dtype.base_dtype) for v in var_list]
      query, _ = lot_lib.gradient_query(cfg, templates)
      # A second DP optimizer in the graph gets tf_dp_privacy_ledger_1...
      ledger = lot_lib.new_ledger(cfg, name=graph.unique_name(
          LEDGER_NAME, mark_as_used=False))
      global_state = lot_lib.global_state_variables(query)
      self._graph_state[graph] = (query, ledger, global_state, templates)
    return self._graph_state[graph]

  def compute_gradients(self, loss, var_list=None, **kwargs):
    """The private mean gradient of ``loss``, one lot per call.

    Privacy contract: see the class docstring; the records' gradients are
    clipped by ``tf_dp.core.vectorized.clipped_sum`` and the lot released
    by ``tf_dp.core.lot.release`` (noise once, one ledger sample).

    Args:
      loss: The per-example loss tensor: ``[batch]``, or ``[batch, ...]``
        (each example's loss is then its mean over the other axes).
      var_list: The variables (default: the trainable variables).

    Returns:
      A list of ``(mean_gradient, variable)`` pairs.

    Raises:
      ValueError: if ``loss`` is a callable or a scalar, or
        under a ``tf.distribute`` strategy with several replicas.
      RuntimeError: when executing eagerly (``tf.gradients`` needs a
        graph), naming the Keras optimizers to use instead.
    """
    del kwargs
    _refuse_several_replicas()
    caller = self._dp_config.caller
    if callable(loss):
      raise ValueError(_graph_only(caller, "a loss callable"))
    if tf.executing_eagerly():
      raise RuntimeError(_graph_only(caller, "a loss computed eagerly"))
    loss = tf.convert_to_tensor(loss)
    if not loss.shape.rank:
      raise ValueError(
          f"The loss must have a value per example (shape [batch], or "
          f"[batch, ...] such as [batch, time]); got shape {loss.shape}. "
          f"Pass it before it is averaged over the batch (e.g. the output "
          f"of tf.nn.softmax_cross_entropy_with_logits, not its "
          f"tf.reduce_mean).")
    if loss.shape.rank > 1:
      # Each example's loss is its own mean over its other axes (time...).
      loss = tf.reduce_mean(loss, axis=list(range(1, loss.shape.rank)))
    if var_list is None:
      var_list = _v1.trainable_variables()
    state = self._state_for_graph(var_list)  # Variables: outside the check.
    checks = ([record_independence.independence_assertion(loss)]
              if self._self_check else [])
    with tf.control_dependencies(checks):  # No update before the check.
      return self._private_gradients(loss, var_list, state)

  def _private_gradients(self, loss, var_list, state):
    cfg = self._dp_config
    query, ledger, global_state, templates = state
    if cfg.num_microbatches is not None:
      record_losses = tf.reduce_mean(
          tf.reshape(loss, [cfg.num_microbatches, -1]), axis=1)
    else:
      record_losses = loss
    records = tf.shape(record_losses)[0]

    def record_gradients(i):
      return vectorized.gradients_or_zeros(
          tf.gradients(tf.gather(record_losses, i), var_list), var_list)

    grads = tf.vectorized_map(record_gradients, tf.range(records),
                              fallback_to_while_loop=True)
    params = query.derive_sample_params(lot_lib.read(global_state))
    lot = query.accumulate_preprocessed_record(
        query.initial_sample_state(templates),
        vectorized.clipped_sum(query, params, grads))
    result, denominator, updates = lot_lib.release(
        query, lot, global_state, ledger, cfg, tf.cast(records, tf.float32),
        tf.cast(tf.shape(loss)[0], tf.float32))
    return list(zip(lot_lib.mean(result, denominator, updates), var_list))


class DPGradientDescentOptimizer(_DPMixin,
                                 _v1.train.GradientDescentOptimizer):
  """DP-SGD: ``tf.compat.v1.train.GradientDescentOptimizer`` with clipping
  and noise. Args: l2_norm_clip, noise_multiplier, population_size, then the
  base optimizer's arguments (learning_rate, ...)."""


class DPAdamOptimizer(_DPMixin, _v1.train.AdamOptimizer):
  """DP ``tf.compat.v1.train.AdamOptimizer`` (see DPGradientDescentOptimizer)."""


class DPAdagradOptimizer(_DPMixin, _v1.train.AdagradOptimizer):
  """DP ``tf.compat.v1.train.AdagradOptimizer`` (see DPGradientDescentOptimizer)."""


_CLASSES: Dict[type, type] = {}


def dp_optimizer_class(optimizer_class):
  """The DP version of a ``tf.compat.v1.train`` optimizer class (created on
  first use, then the same class): arguments ``(l2_norm_clip,
  noise_multiplier, population_size, *args, num_microbatches=None,
  dp_query=None, ...)``, then ``optimizer_class``'s. Privacy contract: as
  ``DPGradientDescentOptimizer``."""
  known = {_v1.train.GradientDescentOptimizer: DPGradientDescentOptimizer,
           _v1.train.AdamOptimizer: DPAdamOptimizer,
           _v1.train.AdagradOptimizer: DPAdagradOptimizer}
  if optimizer_class in known:
    return known[optimizer_class]
  if not (isinstance(optimizer_class, type)
          and issubclass(optimizer_class, _v1.train.Optimizer)):
    raise TypeError(f"optimizer_class must be a tf.compat.v1.train.Optimizer "
                    f"class; got {optimizer_class!r}.")
  if optimizer_class not in _CLASSES:
    _CLASSES[optimizer_class] = type(
        f"DP{optimizer_class.__name__}", (_DPMixin, optimizer_class),
        {"__doc__": f"DP ``{optimizer_class.__name__}`` (see "
                    f"DPGradientDescentOptimizer)."})
  return _CLASSES[optimizer_class]
