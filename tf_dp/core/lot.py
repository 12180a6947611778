"""Releasing one lot: noise once, one ledger sample, the mean gradient.

McMahan & Andrew (2018), Sec. 3: a lot is the sample of records whose
clipped sum is noised together. The functions here take the lot's summed
preprocessed records and do what happens once per lot, whichever front end
formed it (``tf_dp.core.lot_engine`` for Keras, the Estimator optimizers):

1. the ``DPQuery`` adds its noise once (``get_noised_result``) and returns
   the event of what it did;
2. the ledger records one sample with that event and how the lot was
   drawn (``sampling_event``: n, the sampling, q = the lot's examples / n
   for fixed-size and shuffled lots or the sampler's q for Poisson lots,
   examples per record);
3. the query's global state (e.g. an adaptive clip, the public noise
   nonce) advances;
4. the noised sum is divided by the lot's denominator: its number of
   records (fixed-size, shuffled) or its expected number of examples
   ``q * n`` (Poisson, a public constant: the size drawn is private).
"""

from typing import Any, List, Optional, Sequence, Tuple, cast

import tensorflow as tf

from tf_dp.core.config import DPConfig
from tf_dp.correlated_noise_ledger import CorrelatedNoiseLedger
from tf_dp.dp_query import allocation
from tf_dp.dp_query.correlated_noise_query import CorrelatedNoiseQuery
from tf_dp.dp_query.dp_query import DPQuery
from tf_dp.dp_query.dp_query import Nest
from tf_dp.errors import SamplingMismatchError
from tf_dp.privacy_ledger import PrivacyLedger
from tf_dp.privacy_ledger import QueryWithLedger
from tf_dp.privacy_ledger import SamplingEvent
from tf_dp.sampling import Sampling

GLOBAL_STATE_NAME = "dp_global_state"


def gradient_query(config: DPConfig,
                   templates: Nest) -> Tuple[DPQuery, Optional[PrivacyLedger]]:
  """The query that clips and noises the gradients, and its own ledger.

  Privacy contract: the query is ``config.dp_query`` (unwrapped from a
  ``QueryWithLedger``, whose ledger is returned so that it records the
  lots), or one built from ``config.l2_norm_clip`` and
  ``config.noise_multiplier`` with the clipping and noise allocation
  strategies of ``config`` (effective noise multiplier by eq. (1): exactly
  ``noise_multiplier``).

  Args:
    config: A ``tf_dp.core.config.DPConfig``.
    templates: Tensors shaped like the gradients (one per variable).

  Returns:
    ``(query, ledger)``; ledger is None unless ``config.dp_query`` brought
    one.

  Raises:
    SamplingMismatchError: if that ledger's n is not
      ``config.population_size``.
  """
  query, ledger = config.dp_query, None
  if isinstance(config.dp_query, QueryWithLedger):
    query, ledger = config.dp_query.query, config.dp_query.ledger
    ledger_n = int(ledger.population_size.numpy())
    if config.population_size not in (None, ledger_n):
      raise SamplingMismatchError(
          f"population_size={config.population_size!r} but the "
          f"QueryWithLedger's ledger records n = {ledger_n}: every lot is "
          f"accounted with the ledger's n. Build the ledger with "
          f"PrivacyLedger({config.population_size}, ...).")
  if query is None and config.noise_strategy is not None:
    query = CorrelatedNoiseQuery(cast(float, config.l2_norm_clip),
                                 cast(float, config.noise_multiplier),
                                 config.noise_strategy, templates,
                                 secure_mode=config.secure_mode)
  if query is None:
    # Validated as numbers by DPConfig when there is no dp_query.
    query = allocation.build_query(templates,
                                   cast(float, config.l2_norm_clip),
                                   cast(float, config.noise_multiplier),
                                   clipping=config.clipping,
                                   noise=config.noise_allocation,
                                   secure_mode=config.secure_mode)
  return query, ledger


def new_ledger(config: DPConfig, name: str = "privacy_ledger") -> PrivacyLedger:
  """A ledger for the lots of ``config``: its n (1 until a deferred n is
  known), its sampling and q (``1 / n`` until a fixed-size lot records what
  was drawn), one example per record, room for ``config.max_lots`` lots;
  with a ``noise_strategy``, a ``CorrelatedNoiseLedger`` attached, promised
  ``max_passes`` passes at least the strategy's bands apart."""
  n = config.population_size or 1
  ledger = PrivacyLedger(n, config.sampling_probability or 1.0 / n,
                         sampling=config.sampling, examples_per_record=1,
                         max_samples=config.max_lots, name=name,
                         privacy_unit=config.privacy_unit)
  if config.noise_strategy is not None:
    strategy = config.noise_strategy
    ledger.attach_correlated_noise(CorrelatedNoiseLedger(
        strategy, passes=config.max_passes,
        min_separation=strategy.bands if config.max_passes > 1 else None))
  return ledger


def variables_like(structure: Nest, name: str) -> Nest:
  """Non-trainable variables initialised to the tensors of ``structure``."""
  return tf.nest.map_structure(
      lambda t: tf.Variable(t, trainable=False, name=name), structure)


def global_state_variables(query: DPQuery) -> Nest:
  """Non-trainable variables holding ``query``'s initial global state."""
  return variables_like(query.initial_global_state(), GLOBAL_STATE_NAME)


def read(variables: Nest) -> Nest:
  """The current values of a structure of variables."""
  return tf.nest.map_structure(lambda v: v.read_value(), variables)


def assign(variables: Nest, values: Nest) -> tf.Operation:
  """One op assigning ``values`` (cast to each variable's dtype)."""
  return tf.group(tf.nest.flatten(tf.nest.map_structure(
      lambda v, x: v.assign(tf.cast(x, v.dtype)), variables, values)))


def denominator(config: DPConfig, ledger: PrivacyLedger,
                records: tf.Tensor) -> tf.Tensor:
  """What the lot's noised sum is divided by (float32).

  ``q * n`` for Poisson lots (``config.sampling_probability`` and the
  ledger's n: public constants, so the size actually drawn stays private);
  otherwise the lot's number of ``records``.
  """
  if config.sampling is Sampling.POISSON:
    n = tf.cast(ledger.population_size, tf.float32)
    return tf.constant(config.sampling_probability, tf.float32) * n
  return tf.cast(records, tf.float32)


def lot_sampling_event(config: DPConfig, population_size: Any, records: Any,
                       examples: Any) -> SamplingEvent:
  """How a lot of ``records`` records holding ``examples`` examples, drawn
  under ``config`` from ``population_size`` units, is accounted.

  The one rule for a lot's sampling event: what the DP step records
  (``sampling_event``) and what ``tf_dp.keras.PrivacyBudget`` plans before
  the first lot. q is the sampler's ``config.sampling_probability`` for
  Poisson lots (the size drawn is private) and ``min(examples / n, 1)`` for
  fixed-size and shuffled lots; a record holds ``examples / records``
  examples with microbatches, else one; the event records
  ``config.privacy_unit`` (with ``"user"``, n and ``examples`` count users
  and a record is one user).

  Works on Python numbers (a plan; the fields are Python numbers) and on
  float64 tensors (the graph; ``records`` may be of another float dtype).
  ``examples`` is read only for fixed-size and shuffled lots and with
  microbatches, ``records`` only with microbatches: a plan of a Poisson lot
  without microbatches may pass None for both.

  Args:
    config: The ``DPConfig`` of the step.
    population_size: n, the number of units the lot is drawn from.
    records: The lot's number of records.
    examples: The lot's number of examples (users, for user-level lots).

  Returns:
    A ``tf_dp.privacy_ledger.SamplingEvent``: tensor fields where the rule
    reads a tensor, Python numbers where it gives a constant.
  """
  if config.sampling is Sampling.POISSON:
    q = config.sampling_probability
  else:
    q = _at_most_one(_ratio(examples, population_size))
  per_record = 1
  if config.num_microbatches is not None:
    per_record = _ratio(examples, records)
  return SamplingEvent(population_size, q, config.sampling, per_record,
                       config.privacy_unit)


def _ratio(numerator: Any, denominator: Any) -> Any:
  """``numerator / denominator``: in the numerator's dtype for tensors."""
  if tf.is_tensor(numerator):
    return numerator / tf.cast(denominator, numerator.dtype)
  return numerator / denominator


def _at_most_one(value: Any) -> Any:
  return tf.minimum(value, 1.0) if tf.is_tensor(value) else min(value, 1.0)


def sampling_event(config: DPConfig, ledger: PrivacyLedger, records: tf.Tensor,
                   examples: tf.Tensor) -> SamplingEvent:
  """How one lot was drawn, as the ledger records it
  (``lot_sampling_event``).

  Everything comes from ``config`` (what the step does) and from what was
  drawn, never from the ledger's stored defaults, so a ledger built for
  another mechanism (or restored with other values) records this step's
  lots as they were: n is the ledger's current ``population_size`` (set
  from ``config``, or inferred from ``fit``'s arrays).

  Args:
    config: The ``DPConfig`` of the step.
    ledger: The ``PrivacyLedger`` that records the lot (for its n).
    records: The lot's number of records (float32).
    examples: The lot's number of examples (float32).

  Returns:
    A ``tf_dp.privacy_ledger.SamplingEvent`` whose fields are float64
    tensors or Python numbers (the ledger writes both as float64).
  """
  return lot_sampling_event(config,
                            tf.cast(ledger.population_size, tf.float64),
                            records, tf.cast(examples, tf.float64))


def release(query: DPQuery, lot: Nest, global_state: Nest,
            ledger: PrivacyLedger, config: DPConfig,
            records: tf.Tensor,
            examples: tf.Tensor) -> Tuple[Nest, tf.Tensor, List[Any]]:
  """Noises a lot once, records it once, and advances the query's state.

  Privacy contract: ``query.get_noised_result`` adds the query's noise to
  the lot's sum exactly once; ``ledger.record_sample`` is called exactly
  once, with the query's event and how the lot was drawn
  (``sampling_event``); nothing else of the lot leaves this function
  un-noised.

  Args:
    query: The ``DPQuery`` whose sample state ``lot`` is.
    lot: The lot's accumulated sample state (summed preprocessed records).
    global_state: Variables holding the query's global state.
    ledger: The ``PrivacyLedger`` that records the lot.
    config: A ``DPConfig`` (sampling, q, microbatches).
    records: The lot's number of records (float32).
    examples: The lot's number of examples (float32).

  Returns:
    ``(result, denominator, updates)``: the noised result, the float32
    denominator of the mean (``denominator``), and the ops that wrote the
    ledger and the new global state (read the result under them).
  """
  # The noise depends on no data: on a large model (ordered_for_memory)
  # it waits for the lot, since the executor may otherwise draw it (a
  # model's size of floats) early and hold it through the forward and
  # backward passes that produce the lot. Identities in this graph: a
  # control input from an enclosing graph (the lot, when this runs in a
  # tf.cond branch) would be dropped by the branch's function graph.
  lot_tensors = [t for t in tf.nest.flatten(lot) if isinstance(t, tf.Tensor)]
  ready = ([tf.identity(t) for t in lot_tensors]
           if ordered_for_memory(lot_tensors) else [])
  with tf.control_dependencies(ready):
    result, new_global, event = query.get_noised_result(lot,
                                                        read(global_state))
  written = ledger.record_sample(
      event, sampling_event=sampling_event(config, ledger, records, examples))
  # Ordered explicitly: tf.compat.v1 graphs add no automatic dependencies.
  with tf.control_dependencies([written]):
    advanced = assign(global_state, new_global)
  return result, denominator(config, ledger, records), [written, advanced]


# Models of at least this many weights (16 MiB of float32) order the DP
# step for memory: the noise is drawn once the lot exists, and the fast
# path's per-layer work once that layer's output gradients exist, instead
# of during the passes that lead to them (and held through them). On
# smaller models the memory saved is small and the ordering costs time:
# work that ran beside the backward pass waits for it (the 407k-weight MLP
# of benchmarks/step_time.py: DP step 7.6-8.4 ms unordered, 8.6-11.2 ms
# ordered; the 28.6M-weight BERT of benchmarks/lora_step.py: 1811 MiB
# ordered against 2523 MiB before, with the lot's buffers).
ORDERED_FOR_MEMORY_WEIGHTS = 2 ** 22


def ordered_for_memory(tensors: Sequence[Any]) -> bool:
  """Whether a DP step over ``tensors`` (a lot, or the trainable
  variables) is ordered for memory (``ORDERED_FOR_MEMORY_WEIGHTS``); a
  shape unknown until run time counts as large. Ordering changes when
  work runs, never its result."""
  total = 0
  for t in tensors:
    count = tf.TensorShape(t.shape).num_elements()
    if count is None:
      return True
    total += count
  return total >= ORDERED_FOR_MEMORY_WEIGHTS


def mean(noised_sum: Sequence[tf.Tensor], denominator_value: tf.Tensor,
         updates: Sequence[Any]) -> List[tf.Tensor]:
  """The flat list of ``noised_sum / denominator``, read after ``updates``
  (the ledger sample and every state update of the release)."""
  with tf.control_dependencies(updates):
    return [tf.identity(r) / tf.cast(denominator_value, r.dtype)
            for r in tf.nest.flatten(noised_sum)]
