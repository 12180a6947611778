"""Correlated noise across samples: a matrix factorization mechanism.

``CorrelatedNoiseQuery`` clips and sums records like ``GaussianSumQuery``,
but the noise of sample t is not independent of the noise of earlier
samples: it is ``w_t``, the t-th entry of ``w = C^+ z`` for a stored
strategy ``C`` (``tf_dp.analysis.matrix_factorization.Strategy``) and
i.i.d. ``z_t ~ N(0, stddev^2 I)``. The noised sums are then
``C^+ (C x + z)``: post-processing of the Gaussian mechanism ``C x + z``,
whose privacy is accounted from ``C``'s sensitivity for the participation
scheme (``matrix_factorization.sensitivity``), never from sampling.

* banded Toeplitz ``C`` (coefficients ``c_0 .. c_{b-1}``): ``C w = z``
  row by row, ``w_t = (z_t - sum_{j=1}^{b-1} c_j w_{t-j}) / c_0``; the
  state holds the last ``b - 1`` noises, ``(b - 1) x`` the record's size;
* binary-tree aggregation restarted every ``2^h`` samples (DP-FTRL of
  Kairouz et al. 2021): a tree node's noise is drawn when its last leaf
  arrives, and ``w_t`` is the dyadic prefix noise of sample t minus that of
  sample t - 1, i.e. the new node's noise minus the noises of the nodes it
  replaces; the state holds one node per level, ``(h + 1) x`` the record's
  size.

The state (the noises already drawn) is in the global state, so the
engine keeps it in ``tf.Variable``s and checkpoints it: a restored run
continues the same correlated sequence. Those variables hold noise: a
checkpoint with them is as private as the data (it lets its holder remove
part of the noise of later samples); release the model's weights only.
"""

import collections
from typing import Optional, Tuple

import numpy as np
import tensorflow as tf

from tf_dp.analysis import checks
from tf_dp.analysis import matrix_factorization as mf
from tf_dp.dp_query import dp_query
from tf_dp.dp_query import events
from tf_dp.dp_query import gaussian_query
from tf_dp.dp_query import noise
from tf_dp.dp_query.dp_query import Nest

# step: samples released so far (int64); history: per leaf, [slots, *shape]
# of past noises (banded: newest first; tree: one node per level).
CorrelatedNoiseState = collections.namedtuple(
    "CorrelatedNoiseState",
    ["l2_norm_clip", "stddev", "noise_nonce", "step", "history"])


def _spec(leaf):
  if isinstance(leaf, tf.TensorSpec):
    return leaf
  leaf = tf.convert_to_tensor(leaf)
  return tf.TensorSpec(leaf.shape, leaf.dtype)


def _history_dtype(dtype):
  return tf.float64 if dtype == tf.float64 else tf.float32


class CorrelatedNoiseQuery(dp_query.SumAggregationDPQuery):
  """Sum of records clipped to ``l2_norm_clip`` plus correlated noise.

  Privacy contract: each record (a nest of tensors, clipped as one vector)
  contributes at most ``l2_norm_clip`` in L2 norm; a record with a NaN or
  inf contributes zeros. Sample t (counted from 0 by the state's ``step``)
  receives the noise ``w_t`` of ``w = C^+ z`` with ``z`` i.i.d.
  ``N(0, (noise_multiplier * l2_norm_clip)^2)`` per coordinate, drawn by
  ``noise.NoiseGenerator`` (its precision and ``secure_mode``).
  ``get_noised_result`` returns a ``CorrelatedNoiseEvent``; its privacy is
  that of the Gaussian mechanism ``C x + z`` with the sensitivity of ``C``
  for the participation scheme actually run (``strategy.steps`` samples at
  most), which only a correlated-noise ledger accounts; a
  ``PrivacyLedger`` refuses the event.

  Args:
    l2_norm_clip: Clip norm S >= 0.
    noise_multiplier: z's stddev / S (>= 0).
    strategy: A ``matrix_factorization.Strategy`` (banded Toeplitz or tree).
    template: A nest of tensors or ``tf.TensorSpec``s shaped like one
      record (the noise state has these shapes).
    noise_seed: None for OS entropy (default); an int only for tests.
    secure_mode: noise from the OS CSPRNG (see ``noise.py``).

  Example:
    >>> strategy = matrix_factorization.banded_strategy(1000, 8)
    >>> query = CorrelatedNoiseQuery(1.0, 2.0, strategy, [tf.zeros([10])])
  """

  def __init__(self, l2_norm_clip: float, noise_multiplier: float,
               strategy: mf.Strategy, template: Nest,
               noise_seed: Optional[int] = None,
               secure_mode: bool = False) -> None:
    self._l2_norm_clip = checks.check_non_negative("l2_norm_clip",
                                                   l2_norm_clip)
    self._noise_multiplier = checks.check_non_negative("noise_multiplier",
                                                       noise_multiplier)
    if not isinstance(strategy, mf.Strategy):
      raise TypeError(f"strategy must be a tf_dp.analysis."
                      f"matrix_factorization.Strategy (banded_strategy or "
                      f"tree_strategy); got {strategy!r}.")
    self._strategy = strategy
    self._specs = tf.nest.map_structure(_spec, template)
    self._noise = noise.NoiseGenerator(noise_seed, secure_mode)
    if strategy.kind == mf.BANDED_TOEPLITZ:
      self._slots = len(strategy.coefficients) - 1
    else:
      self._slots = strategy.height + 1

  @property
  def strategy(self) -> mf.Strategy:
    return self._strategy

  @property
  def l2_norm_clip(self) -> float:
    return self._l2_norm_clip

  @property
  def noise_multiplier(self) -> float:
    return self._noise_multiplier

  @property
  def secure_mode(self) -> bool:
    return self._noise.secure_mode

  @property
  def state_size(self) -> int:
    """Numbers held in the noise state: slots x the record's size
    (banded: ``b - 1`` slots; tree: ``height + 1``)."""
    size = sum(int(np.prod(s.shape.as_list(), dtype=np.int64))
               for s in tf.nest.flatten(self._specs))
    return self._slots * size

  def initial_global_state(self) -> Nest:
    history = tf.nest.map_structure(
        lambda s: tf.zeros([self._slots] + s.shape.as_list(),
                           _history_dtype(s.dtype)), self._specs)
    return CorrelatedNoiseState(
        tf.constant(self._l2_norm_clip, tf.float32),
        tf.constant(self._l2_norm_clip * self._noise_multiplier, tf.float32),
        self._noise.initial_nonce(), tf.constant(0, tf.int64), history)

  # Clipping, the fast path's scales and the metrics are the Gaussian sum
  # query's: only the noise differs.
  derive_sample_params = gaussian_query.GaussianSumQuery.derive_sample_params
  preprocess_record = gaussian_query.GaussianSumQuery.preprocess_record
  derive_metrics = gaussian_query.GaussianSumQuery.derive_metrics
  supports_record_scales = gaussian_query.GaussianSumQuery.supports_record_scales
  record_scales = gaussian_query.GaussianSumQuery.record_scales
  preprocessed_sum = gaussian_query.GaussianSumQuery.preprocessed_sum

  def _banded_noise(self, global_state):
    """(w_t per leaf, new history): ``c_0 w_t = z_t - sum c_j w_{t-j}``."""
    c = self._strategy.coefficients
    history = tf.nest.flatten(global_state.history)

    def carry(h):
      if not self._slots:
        return tf.zeros(h.shape[1:], h.dtype)
      tail = tf.constant(c[1:], h.dtype)
      return tf.tensordot(tail, h, axes=1)

    scaled = self._noise.add([-carry(h) for h in history],
                             global_state.stddev, global_state.noise_nonce)
    noises = [s / tf.constant(c[0], s.dtype) for s in scaled]
    new_history = [tf.concat([w[None], h[:-1]], 0) if self._slots else h
                   for w, h in zip(noises, history)]
    return noises, new_history

  def _tree_noise(self, global_state):
    """(w_t per leaf, new nodes): the new node minus the nodes it replaces."""
    history = tf.nest.flatten(global_state.history)
    leaves = 2 ** self._strategy.height
    position = tf.math.floormod(global_state.step, leaves) + 1  # 1-based
    lowest_bit = tf.bitwise.bitwise_and(position, -position)
    level = tf.cast(tf.raw_ops.PopulationCount(x=lowest_bit - 1), tf.int32)
    levels = tf.range(self._slots)
    nodes = self._noise.add([tf.zeros(h.shape[1:], h.dtype) for h in history],
                            global_state.stddev, global_state.noise_nonce)
    noises, new_history = [], []
    for node, h in zip(nodes, history):
      below = tf.cast(levels < level, h.dtype)
      above = tf.cast(levels > level, h.dtype)
      at = tf.cast(tf.equal(levels, level), h.dtype)
      noises.append(node - tf.tensordot(below, h, axes=1))
      expand = lambda v: tf.reshape(v, [-1] + [1] * (h.shape.rank - 1))
      new_history.append(h * expand(above) + expand(at) * node[None])
    return noises, new_history

  def get_noised_result(self, sample_state: Nest,
                        global_state: Nest) -> Tuple[Nest, Nest, Nest]:
    if self._strategy.kind == mf.BANDED_TOEPLITZ:
      noises, new_history = self._banded_noise(global_state)
    else:
      noises, new_history = self._tree_noise(global_state)
    flat = tf.nest.flatten(sample_state)
    result = [tf.cast(tf.cast(x, w.dtype) + w, x.dtype)
              for x, w in zip(flat, noises)]
    new_state = global_state._replace(
        noise_nonce=self._noise.advance(global_state.noise_nonce),
        step=global_state.step + 1,
        history=tf.nest.pack_sequence_as(global_state.history, new_history))
    event = events.CorrelatedNoiseEvent(global_state.l2_norm_clip,
                                        global_state.stddev,
                                        global_state.step)
    return tf.nest.pack_sequence_as(sample_state, result), new_state, event
