"""Per-record gradients to a clipped sum, with ``tf.vectorized_map``.

A front end computes one gradient per record (an example, or a microbatch
whose gradient is the mean over its examples) stacked along a leading axis;
``clipped_sum`` preprocesses each record with the query (which clips it)
and adds them up. The Keras per-example path and the Estimator optimizers
both end here, so a record is clipped the same way whichever front end
computed its gradient.
"""

from typing import List, Optional, Sequence

import tensorflow as tf

from tf_dp.dp_query.dp_query import DPQuery
from tf_dp.dp_query.dp_query import Nest


def gradients_or_zeros(grads: Sequence[Optional[tf.Tensor]],
                       variables: Sequence[tf.Variable]) -> List[tf.Tensor]:
  """Dense gradients, with zeros where a variable does not affect the loss.

  (``unconnected_gradients=ZERO`` fails on Keras 3 variables, whose dtype is
  a string.)

  Args:
    grads: A list of gradients (tensors, ``IndexedSlices`` or None), one per
      variable.
    variables: The variables they belong to.

  Returns:
    A list of dense tensors shaped like ``variables``.
  """
  return [tf.zeros(v.shape, tf.as_dtype(v.dtype).base_dtype) if g is None
          else tf.convert_to_tensor(g) for g, v in zip(grads, variables)]


def clipped_sum(query: DPQuery, params: Nest, records: Nest,
                weights: Optional[tf.Tensor] = None) -> Nest:
  """The sum over records of ``query.preprocess_record(params, record)``.

  Privacy contract: each record is preprocessed on its own (for a
  ``GaussianSumQuery``: clipped to its ``l2_norm_clip``), so one record
  changes the sum by at most twice the query's bound; nothing is noised
  here (the noise is added once per lot, when the lot is released).

  Args:
    query: The ``DPQuery`` that preprocesses (clips) each record.
    params: Its sample parameters (``query.derive_sample_params``).
    records: A nest of tensors whose leading axis indexes the records (e.g.
      one ``[records, *variable.shape]`` gradient per variable).
    weights: Optional ``[records]`` 0/1 tensor: records of weight 0 (absent
      from a Poisson lot) are left out of the sum.

  Returns:
    The summed preprocessed records, structured like one preprocessed
    record.
  """
  preprocessed = tf.vectorized_map(
      lambda record: query.preprocess_record(params, record), records,
      fallback_to_while_loop=True)
  if weights is None:
    return tf.nest.map_structure(lambda t: tf.reduce_sum(t, axis=0),
                                 preprocessed)
  return tf.nest.map_structure(
      lambda t: tf.tensordot(weights, t, axes=[[0], [0]]), preprocessed)
