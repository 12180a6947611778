"""Audit of one Gaussian sum query on neighbouring inputs.

The record absent (sum = 0) against present with maximal norm (sum = C e_1),
both noised by the query under test, ``trials`` times each; the output is
the score. Returns the accountant's epsilon and the empirical lower bound.
"""

import tensorflow as tf

from tf_dp.analysis import compute_rdp
from tf_dp.analysis import DEFAULT_ORDERS
from tf_dp.analysis import get_privacy_spent
from tf_dp.reproductions.audit import bounds


def _noised_outputs(query, record_present, trials):
  state = query.initial_global_state()
  params = query.derive_sample_params(state)
  template = tf.zeros([1])
  sample = query.initial_sample_state(template)
  if record_present:
    big = tf.constant([1e6])  # clipped to norm C: the worst-case record.
    sample = query.accumulate_record(params, sample, big)

  @tf.function
  def run(state):
    outputs = tf.TensorArray(tf.float32, size=trials)

    def body(i, state, outputs):
      result, state, _ = query.get_noised_result(sample, state)
      return i + 1, state, outputs.write(i, tf.reshape(result, []))

    _, _, outputs = tf.while_loop(lambda i, *_: i < trials, body,
                                  (0, state, outputs))
    return outputs.stack()

  return run(state).numpy()


def audit_gaussian_sum_query(query, noise_multiplier, trials=100000,
                             delta=1e-5, alpha=0.05):
  """``(claimed_epsilon, empirical_lower_bound)`` for one release.

  ``noise_multiplier`` is what the query claims (stddev / clip); the claim
  is accounted as one Gaussian mechanism (q = 1) with the tight conversion.
  """
  rdp = compute_rdp(1.0, noise_multiplier, 1, DEFAULT_ORDERS)
  claimed = get_privacy_spent(DEFAULT_ORDERS, rdp, target_delta=delta)[0]
  without = _noised_outputs(query, False, trials)
  with_ = _noised_outputs(query, True, trials)
  lower, _ = bounds.best_threshold_epsilon_lower_bound(without, with_, delta,
                                                       alpha)
  return claimed, lower
