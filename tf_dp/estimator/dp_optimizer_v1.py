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

After training, ``tf_dp.estimator.ledger_from_checkpoint(model_dir)`` reads
the ledger, which lives in named variables saved in the checkpoint.
"""

import tensorflow as tf

from tf_dp.core import config as config_lib
from tf_dp.dp_query import allocation
from tf_dp.privacy_ledger import PrivacyLedger
from tf_dp.privacy_ledger import QueryWithLedger

LEDGER_NAME = "tf_dp_privacy_ledger"

_v1 = tf.compat.v1


class _DPMixin:
  """Clips per-record gradients, noises the sum once, records the ledger.

  Privacy contract: as ``tf_dp.DPOptimizer`` with one batch per lot: each
  record's gradient (one example, or the mean over a microbatch) is clipped
  to ``l2_norm_clip``; N(0, (noise_multiplier * l2_norm_clip)^2) is added once
  to the sum; the sum is divided by the number of records; one ledger sample
  is written per ``compute_gradients`` call.
  """

  def __init__(self, l2_norm_clip, noise_multiplier, population_size, *args,
               num_microbatches=None, dp_query=None, sampling="fixed_size",
               sampling_probability=None, **kwargs):
    super().__init__(*args, **kwargs)
    if population_size is None:
      raise ValueError("population_size is required by the Estimator "
                       "optimizer. " + config_lib.POPULATION_SIZE_REQUIRED)
    if isinstance(dp_query, QueryWithLedger):
      raise ValueError(
          "dp_query is wrapped in a QueryWithLedger: pass the query itself. "
          "The Estimator optimizer records its own ledger in the graph "
          "(read it with tf_dp.estimator.ledger_from_checkpoint).")
    self._dp_config = config_lib.DPConfig(
        l2_norm_clip=l2_norm_clip, noise_multiplier=noise_multiplier,
        num_microbatches=num_microbatches, dp_query=dp_query,
        population_size=population_size, sampling=sampling,
        sampling_probability=sampling_probability)
    self._graph_state = {}

  @property
  def dp_config(self):
    return self._dp_config

  def _state_for_graph(self, var_list):
    graph = _v1.get_default_graph()
    if graph not in self._graph_state:
      cfg = self._dp_config
      templates = [tf.zeros(v.shape, v.dtype.base_dtype) for v in var_list]
      query = cfg.dp_query or allocation.build_query(
          templates, cfg.l2_norm_clip, cfg.noise_multiplier,
          secure_mode=cfg.secure_mode)
      ledger = PrivacyLedger(
          cfg.population_size,
          cfg.sampling_probability or 1.0 / cfg.population_size,
          sampling=cfg.sampling, max_samples=cfg.max_lots, name=LEDGER_NAME)
      global_state = tf.nest.map_structure(
          lambda t: tf.Variable(t, trainable=False, name="dp_global_state"),
          query.initial_global_state())
      self._graph_state[graph] = (query, ledger, global_state, templates)
    return self._graph_state[graph]

  def compute_gradients(self, loss, var_list=None, **kwargs):
    del kwargs
    if callable(loss):
      raise ValueError("tf_dp v1 optimizers need the per-example loss "
                       "tensor, not a callable.")
    loss = tf.convert_to_tensor(loss)
    if loss.shape.rank != 1:
      raise ValueError(
          f"The loss must have one value per example (shape [batch]); got "
          f"shape {loss.shape}. Do not reduce it with tf.reduce_mean.")
    if var_list is None:
      var_list = _v1.trainable_variables()
    cfg = self._dp_config
    query, ledger, global_state, templates = self._state_for_graph(var_list)
    if cfg.num_microbatches is not None:
      record_losses = tf.reduce_mean(
          tf.reshape(loss, [cfg.num_microbatches, -1]), axis=1)
    else:
      record_losses = loss
    records = tf.shape(record_losses)[0]

    def record_gradients(i):
      grads = tf.gradients(tf.gather(record_losses, i), var_list)
      return [tf.zeros_like(v) if g is None else tf.convert_to_tensor(g)
              for g, v in zip(grads, var_list)]

    grads = tf.vectorized_map(record_gradients, tf.range(records),
                              fallback_to_while_loop=True)
    state = tf.nest.map_structure(lambda v: v.read_value(), global_state)
    params = query.derive_sample_params(state)
    clipped = tf.vectorized_map(lambda g: query.preprocess_record(params, g),
                                grads, fallback_to_while_loop=True)
    batch_sum = tf.nest.map_structure(lambda t: tf.reduce_sum(t, 0), clipped)
    sample = query.accumulate_preprocessed_record(
        query.initial_sample_state(templates), batch_sum)
    result, new_state, event = query.get_noised_result(sample, state)
    # One ledger sample per call: what was drawn (a fixed-size sample
    # records q = batch / n) and how many examples form a record.
    examples = tf.shape(loss)[0]
    written = ledger.record_sample(
        event, sample_size=examples,
        examples_per_record=examples // records)
    with tf.control_dependencies([written]):
      assigns = [v.assign(x) for v, x in zip(tf.nest.flatten(global_state),
                                             tf.nest.flatten(new_state))]
    if cfg.sampling == "poisson":
      denominator = tf.constant(cfg.sampling_probability
                                * cfg.population_size, tf.float32)
    else:
      denominator = tf.cast(records, tf.float32)
    with tf.control_dependencies(assigns):
      mean = [tf.identity(r) / denominator for r in tf.nest.flatten(result)]
    return list(zip(mean, var_list))


class DPGradientDescentOptimizer(_DPMixin,
                                 _v1.train.GradientDescentOptimizer):
  """DP-SGD: ``tf.compat.v1.train.GradientDescentOptimizer`` with clipping
  and noise. Args: l2_norm_clip, noise_multiplier, population_size, then the
  base optimizer's arguments (learning_rate, ...)."""


class DPAdamOptimizer(_DPMixin, _v1.train.AdamOptimizer):
  """DP ``tf.compat.v1.train.AdamOptimizer`` (see DPGradientDescentOptimizer)."""


class DPAdagradOptimizer(_DPMixin, _v1.train.AdagradOptimizer):
  """DP ``tf.compat.v1.train.AdagradOptimizer`` (see DPGradientDescentOptimizer)."""
