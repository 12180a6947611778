"""Average with a fixed expected denominator (McMahan et al. 2018's f_f)."""

import collections
from typing import Any, Dict, Optional, Tuple

import tensorflow as tf

from tf_dp.analysis import checks
from tf_dp.dp_query import dp_query
from tf_dp.dp_query.dp_query import Nest

NormalizedState = collections.namedtuple(
    "NormalizedState", ["numerator_state", "denominator"])


class NormalizedQuery(dp_query.WrapperQuery):
  """Divides the noised result of a sum query by a fixed ``denominator``.

  With Poisson sampling at rate q from n records, ``denominator = q * n``
  gives an unbiased estimate of the average (McMahan & Andrew 2018, Sec. 1).
  The denominator is public (it does not depend on the sample), so the
  division is post-processing: the privacy contract and the event are those
  of ``numerator_query``.

  Args:
    numerator_query: A sum query (e.g. ``GaussianSumQuery``).
    denominator: Expected number of records per sample, > 0.
  """

  def __init__(self, numerator_query: dp_query.DPQuery,
               denominator: Optional[float]) -> None:
    super().__init__(numerator_query)
    self._denominator = checks.check_positive(
        "denominator", denominator,
        " It is the expected number of records per sample (q * n).")

  @property
  def numerator_query(self) -> dp_query.DPQuery:
    return self._wrapped

  def initial_global_state(self) -> Nest:
    return NormalizedState(self._wrapped.initial_global_state(),
                           tf.constant(self._denominator, tf.float32))

  def derive_sample_params(self, global_state: Nest) -> Nest:
    return self._wrapped.derive_sample_params(global_state.numerator_state)

  def get_noised_result(self, sample_state: Nest,
                        global_state: Nest) -> Tuple[Nest, Nest, Nest]:
    noised_sum, numerator_state, event = self._wrapped.get_noised_result(
        sample_state, global_state.numerator_state)
    result = tf.nest.map_structure(
        lambda x: x / tf.cast(global_state.denominator, x.dtype), noised_sum)
    return result, global_state._replace(numerator_state=numerator_state), (
        event)

  def derive_metrics(self, global_state: Nest) -> Dict[str, Any]:
    return self._wrapped.derive_metrics(global_state.numerator_state)
