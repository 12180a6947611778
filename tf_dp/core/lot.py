"""Releasing one lot: noise once, one ledger sample, the mean gradient.

McMahan & Andrew (2018), Sec. 3: a lot is the sample of records whose
clipped sum is noised together. The functions here take the lot's summed
preprocessed records and do what happens once per lot, whichever front end
formed it (``tf_dp.core.lot_engine`` for Keras, the Estimator optimizers):

1. the ``DPQuery`` adds its noise once (``get_noised_result``) and returns
   the event of what it did;
2. the ledger records one sample with that event and what was drawn
   (``sample_size``: the lot's number of examples for fixed-size and
   shuffled lots; nothing for Poisson lots, whose q is the sampler's);
3. the query's global state (e.g. an adaptive clip, the public noise
   nonce) advances;
4. the noised sum is divided by the lot's denominator: its number of
   records (fixed-size, shuffled) or its expected number of examples
   ``q * n`` (Poisson, a public constant: the size drawn is private).
"""

import tensorflow as tf

from tf_dp.dp_query import allocation
from tf_dp.privacy_ledger import PrivacyLedger
from tf_dp.privacy_ledger import QueryWithLedger

GLOBAL_STATE_NAME = "dp_global_state"


def gradient_query(config, templates):
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
  """
  query, ledger = config.dp_query, None
  if isinstance(query, QueryWithLedger):
    query, ledger = query.query, query.ledger
  if query is None:
    query = allocation.build_query(templates, config.l2_norm_clip,
                                   config.noise_multiplier,
                                   clipping=config.clipping,
                                   noise=config.noise_allocation,
                                   secure_mode=config.secure_mode)
  return query, ledger


def new_ledger(config, name="privacy_ledger"):
  """A ledger for the lots of ``config``: its n (1 until a deferred n is
  known), its sampling and q (``1 / n`` until a fixed-size lot records what
  was drawn), one example per record, room for ``config.max_lots`` lots."""
  n = config.population_size or 1
  return PrivacyLedger(n, config.sampling_probability or 1.0 / n,
                       sampling=config.sampling, examples_per_record=1,
                       max_samples=config.max_lots, name=name)


def variables_like(structure, name):
  """Non-trainable variables initialised to the tensors of ``structure``."""
  return tf.nest.map_structure(
      lambda t: tf.Variable(t, trainable=False, name=name), structure)


def global_state_variables(query):
  """Non-trainable variables holding ``query``'s initial global state."""
  return variables_like(query.initial_global_state(), GLOBAL_STATE_NAME)


def read(variables):
  """The current values of a structure of variables."""
  return tf.nest.map_structure(lambda v: v.read_value(), variables)


def assign(variables, values):
  """One op assigning ``values`` (cast to each variable's dtype)."""
  return tf.group(tf.nest.flatten(tf.nest.map_structure(
      lambda v, x: v.assign(tf.cast(x, v.dtype)), variables, values)))


def denominator(config, ledger, records):
  """What the lot's noised sum is divided by (float32).

  ``q * n`` for Poisson lots (``config.sampling_probability`` and the
  ledger's n: public constants, so the size actually drawn stays private);
  otherwise the lot's number of ``records``.
  """
  if config.sampling == "poisson":
    n = tf.cast(ledger.population_size, tf.float32)
    return tf.constant(config.sampling_probability, tf.float32) * n
  return tf.cast(records, tf.float32)


def drawn(config, records, examples):
  """The ``record_sample`` arguments that say what the lot drew.

  Fixed-size and shuffled lots: ``sample_size`` (the lot's examples, so
  the ledger records ``q = examples / n``) and, with microbatches,
  ``examples / records`` examples per record. Poisson lots: nothing (the
  ledger keeps the sampler's q; the size drawn is private).
  """
  if config.sampling == "poisson":
    return {}
  return dict(sample_size=examples, examples_per_record=(
      examples / records if config.num_microbatches is not None else None))


def release(query, lot, global_state, ledger, config, records, examples):
  """Noises a lot once, records it once, and advances the query's state.

  Privacy contract: ``query.get_noised_result`` adds the query's noise to
  the lot's sum exactly once; ``ledger.record_sample`` is called exactly
  once, with the query's event and what was drawn (``drawn``); nothing
  else of the lot leaves this function un-noised.

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
  result, new_global, event = query.get_noised_result(lot, read(global_state))
  written = ledger.record_sample(event, **drawn(config, records, examples))
  # Ordered explicitly: tf.compat.v1 graphs add no automatic dependencies.
  with tf.control_dependencies([written]):
    advanced = assign(global_state, new_global)
  return result, denominator(config, ledger, records), [written, advanced]


def mean(noised_sum, denominator_value, updates):
  """The flat list of ``noised_sum / denominator``, read after ``updates``
  (the ledger sample and every state update of the release)."""
  with tf.control_dependencies(updates):
    return [tf.identity(r) / tf.cast(denominator_value, r.dtype)
            for r in tf.nest.flatten(noised_sum)]
