"""Private estimation of a quantile of one scalar per record.

Andrew, Thakkar, McMahan & Ramaswamy (2021), "Differentially private
learning with adaptive clipping", Sec. 2: each record contributes the bit
``b = 1{record <= estimate} - 1/2`` (sensitivity 1/2); the noised sum of the
bits over the expected number of records, plus 1/2, estimates the fraction
of records below the estimate, and the estimate takes one step of the
quantile loss towards the target: geometric ``x <- x exp(-eta (f - gamma))``
(for non-negative values such as norms) or arithmetic ``x <- x - eta (f -
gamma)``.

Privacy contract: one Gaussian sum query on bits, recorded as
``SumQueryEvent(0.5, below_estimate_stddev)``; the estimate is
post-processing of it.
"""

import collections
from typing import Any, Dict, Optional, Tuple

import tensorflow as tf

from tf_dp.analysis import checks
from tf_dp.dp_query import dp_query
from tf_dp.dp_query import events
from tf_dp.dp_query import no_privacy_query
from tf_dp.dp_query import noise
from tf_dp.dp_query.dp_query import Nest

QuantileEstimatorState = collections.namedtuple(
    "QuantileEstimatorState",
    ["estimate", "below_estimate_stddev", "noise_nonce"])


def check_learning_rate(learning_rate: Any) -> Any:
  """A float >= 0, or a ``tf.Variable`` read at every update."""
  if isinstance(learning_rate, tf.Variable):
    return learning_rate
  return checks.check_non_negative("learning_rate", learning_rate)


def updated_estimate(estimate: tf.Tensor, below_fraction: tf.Tensor,
                     target: float, learning_rate: tf.Tensor,
                     geometric_update: bool) -> tf.Tensor:
  """One step of the quantile loss from a (noised) fraction below.

  The fraction is clamped to [0, 1] (noise can push it outside); the
  derivative of the loss is ``fraction - target``, in [-1, 1].
  """
  below = tf.clip_by_value(below_fraction, 0.0, 1.0)
  step = tf.cast(learning_rate, tf.float32) * (below - target)
  if geometric_update:
    return estimate * tf.exp(-step)
  return estimate - step


def below_estimate_bit(record: tf.Tensor, estimate: tf.Tensor) -> tf.Tensor:
  """``1{record <= estimate} - 1/2``, the record's contribution."""
  return tf.cast(record <= tf.cast(estimate, record.dtype), tf.float32) - 0.5


class QuantileEstimatorQuery(dp_query.DPQuery):
  """Tracks a target quantile of one scalar per record, privately.

  Each lot's noised result is the updated estimate.

  Args:
    initial_estimate: Starting estimate.
    target_quantile: gamma in [0, 1] (0.5 for the median).
    learning_rate: eta >= 0, a float or a ``tf.Variable`` (0 keeps the
      estimate fixed).
    below_estimate_stddev: Noise stddev on the sum of bits (sensitivity
      1/2); 0 makes the query non-private (epsilon = inf in the ledger).
    expected_num_records: q * n, the public denominator of the fraction.
    geometric_update: Geometric (default) or arithmetic steps.
    noise_seed: None for OS entropy (default).
    secure_mode: True for noise from the OS CSPRNG (see ``noise.py``).
  """

  def __init__(self, initial_estimate: float, target_quantile: float,
               learning_rate: Any, below_estimate_stddev: float,
               expected_num_records: float, geometric_update: bool = True,
               noise_seed: Optional[int] = None,
               secure_mode: bool = False) -> None:
    self._initial = checks.check_non_negative(
        "initial_estimate", initial_estimate) if geometric_update else float(
            initial_estimate)
    self._target = checks.check_probability("target_quantile",
                                            target_quantile)
    self._lr = check_learning_rate(learning_rate)
    self._stddev = checks.check_non_negative("below_estimate_stddev",
                                             below_estimate_stddev)
    self._expected = checks.check_positive("expected_num_records",
                                           expected_num_records)
    self._geometric = bool(geometric_update)
    self._noise = noise.NoiseGenerator(noise_seed, secure_mode)

  def initial_global_state(self) -> Nest:
    return QuantileEstimatorState(tf.constant(self._initial),
                                  tf.constant(self._stddev),
                                  self._noise.initial_nonce())

  def derive_sample_params(self, global_state: Nest) -> Nest:
    return global_state.estimate

  def initial_sample_state(self, template: Nest = None) -> Nest:
    del template  # Records are scalars; the state is the sum of their bits.
    return tf.constant(0.0)

  def preprocess_record(self, params: Nest, record: Nest) -> Nest:
    record = tf.convert_to_tensor(record)
    if record.shape.rank != 0:
      raise ValueError(f"{type(self).__name__} records must be scalars; got "
                       f"a record of shape {record.shape}.")
    return below_estimate_bit(record, params)

  def accumulate_preprocessed_record(self, sample_state: Nest,
                                     preprocessed_record: Nest) -> Nest:
    return sample_state + preprocessed_record

  def merge_sample_states(self, sample_state_1: Nest,
                          sample_state_2: Nest) -> Nest:
    return sample_state_1 + sample_state_2

  def get_noised_result(self, sample_state: Nest,
                        global_state: Nest) -> Tuple[Nest, Nest, Nest]:
    noised = self._noise.add(sample_state, global_state.below_estimate_stddev,
                             global_state.noise_nonce)
    fraction = noised / self._expected + 0.5
    estimate = updated_estimate(global_state.estimate, fraction, self._target,
                                self._lr, self._geometric)
    new_state = global_state._replace(
        estimate=estimate,
        noise_nonce=self._noise.advance(global_state.noise_nonce))
    event = events.SumQueryEvent(tf.constant(0.5),
                                 global_state.below_estimate_stddev)
    return estimate, new_state, event

  def derive_metrics(self, global_state: Nest) -> Dict[str, Any]:
    return {"estimate": global_state.estimate}


class NoPrivacyQuantileEstimatorQuery(QuantileEstimatorQuery):
  """``QuantileEstimatorQuery`` without noise, for non-private baselines.

  The fraction below uses the exact number of records. Privacy contract:
  none; the event has infinite clip and zero noise, so a ledger that
  recorded it reports epsilon = inf.
  """

  def __init__(self, initial_estimate: float, target_quantile: float,
               learning_rate: Any, geometric_update: bool = True) -> None:
    super().__init__(initial_estimate, target_quantile, learning_rate,
                     below_estimate_stddev=0.0, expected_num_records=1.0,
                     geometric_update=geometric_update)

  def initial_sample_state(self, template: Nest = None) -> Nest:
    del template
    return tf.zeros([2])  # (sum of bits, number of records)

  def preprocess_record(self, params: Nest, record: Nest) -> Nest:
    return tf.stack([super().preprocess_record(params, record), 1.0])

  def get_noised_result(self, sample_state: Nest,
                        global_state: Nest) -> Tuple[Nest, Nest, Nest]:
    count = tf.maximum(sample_state[1], 1.0)
    fraction = sample_state[0] / count + 0.5
    estimate = updated_estimate(global_state.estimate, fraction, self._target,
                                self._lr, self._geometric)
    return (estimate, global_state._replace(estimate=estimate),
            no_privacy_query.non_private_event())
