"""Clip and noise allocation strategies (McMahan & Andrew 2018, Sec. 2 and 4).

Given G groups (e.g. layers) of dimensions d_g, D = sum d_g, a total L2
bound S* and a target noise multiplier z, a clipping strategy allocates the
clip norms S_g and a noise strategy the noise stddevs sigma_g. They are
chosen independently (``build_query(clipping=..., noise=...)``); each has a
``"dimensionality_adjusted"`` variant that takes the dimensions d_g into
account, and these are two different strategies:

Clipping (``clipping=``):
  * ``flat``: one group, S*.
  * ``per_layer``: S_g = S* / sqrt(G).
  * ``dimensionality_adjusted``: S_g = S* sqrt(d_g / D). The paper prints
    ``S*/sqrt(d_g/D)``; that would make sum_g S_g^2 = S*^2 sum_g D/d_g, larger
    than the total bound S*, so we read it as S* sqrt(d_g/D), for which
    sum_g S_g^2 = S*^2 as for the other two strategies. (The paper gives
    this one no name.)
Noise (``noise=``; the stddev of the noise added to each group's sum):
  * ``proportional``: sigma_g = z sqrt(G) S_g.
  * ``dimensionality_adjusted``: sigma_g = z sqrt(D / d_g) S_g (the
    paper's "dimensionality adjusted" noise).
Both make the effective noise multiplier of eq. (1) equal to z:
  z_eff = (sum_g (S_g / sigma_g)^2)^(-1/2)
(``tf_dp.analysis.allocation.effective_noise_multiplier``, re-exported
here).
"""

import math
from typing import List, Optional, Sequence

import numpy as np
import tensorflow as tf

from tf_dp.analysis import checks
from tf_dp.analysis.allocation import effective_noise_multiplier  # pylint: disable=unused-import
from tf_dp.dp_query import gaussian_query
from tf_dp.dp_query import nested_query
from tf_dp.dp_query import normalized_query
from tf_dp.dp_query.dp_query import DPQuery
from tf_dp.dp_query.dp_query import Nest

CLIPPING_STRATEGIES = ("flat", "per_layer", "dimensionality_adjusted")
NOISE_STRATEGIES = ("proportional", "dimensionality_adjusted")


def _clipping_strategy(strategy):
  return checks.check_choice("clipping strategy", strategy,
                             CLIPPING_STRATEGIES)


def group_clips(total_l2_norm_clip: float, dims: Sequence[int],
                strategy: str) -> List[float]:
  """Per-group clip norms S_g for the given clipping strategy."""
  total = checks.check_positive("total_l2_norm_clip", total_l2_norm_clip)
  strategy = _clipping_strategy(strategy)
  d = np.asarray(dims, dtype=float)
  if strategy == "flat":
    return [total]
  if strategy == "per_layer":
    return [total / math.sqrt(len(d))] * len(d)
  return list(total * np.sqrt(d / d.sum()))


def group_stddevs(noise_multiplier: float, clips: Sequence[float],
                  dims: Sequence[int], strategy: str) -> List[float]:
  """Per-group noise stddevs sigma_g for the given noise strategy."""
  z = checks.check_non_negative("noise_multiplier", noise_multiplier)
  strategy = checks.check_choice("noise strategy", strategy,
                                 NOISE_STRATEGIES)
  c = np.asarray(clips, dtype=float)
  d = np.asarray(dims, dtype=float)
  if strategy == "proportional":
    return list(z * math.sqrt(len(c)) * c)
  return list(z * np.sqrt(d.sum() / d) * c)


def build_query(template: Nest, l2_norm_clip: float, noise_multiplier: float,
                clipping: str = "flat", noise: str = "proportional",
                denominator: Optional[float] = None,
                noise_seed: Optional[int] = None,
                secure_mode: bool = False) -> DPQuery:
  """A query for records shaped like ``template`` under a strategy.

  Each leaf of ``template`` (e.g. each trainable variable) is a group for
  the ``per_layer`` and ``dimensionality_adjusted`` clipping strategies.

  Privacy contract: the effective noise multiplier (eq. 1) of the returned
  query is ``noise_multiplier`` for every strategy, with total L2 bound
  ``l2_norm_clip``. ``noise_seed`` and ``secure_mode`` are passed to every
  ``GaussianSumQuery`` (see its docstring).

  Args:
    template: A nest of tensors shaped like one record.
    l2_norm_clip: The total L2 bound S* of a record.
    noise_multiplier: z, the target effective noise multiplier.
    clipping: ``"flat"``, ``"per_layer"`` or ``"dimensionality_adjusted"``
      (module docstring).
    noise: ``"proportional"`` or ``"dimensionality_adjusted"``.
    denominator: If given, each query is a ``NormalizedQuery`` by it.
    noise_seed: As ``GaussianSumQuery``'s.
    secure_mode: As ``GaussianSumQuery``'s.

  Returns:
    A ``GaussianSumQuery`` (flat) or ``NestedQuery`` of them, each wrapped in
    a ``NormalizedQuery`` if ``denominator`` is given.
  """
  clipping = _clipping_strategy(clipping)
  checks.check_choice("noise strategy", noise, NOISE_STRATEGIES)
  leaves = tf.nest.flatten(template)
  dims = [max(int(np.prod(t.shape)), 1) for t in leaves]

  def wrap(q):
    return q if denominator is None else normalized_query.NormalizedQuery(
        q, denominator)

  if clipping == "flat":
    return wrap(gaussian_query.GaussianSumQuery(
        l2_norm_clip, noise_multiplier * l2_norm_clip, noise_seed,
        secure_mode))
  clips = group_clips(l2_norm_clip, dims, clipping)
  stddevs = group_stddevs(noise_multiplier, clips, dims, noise)
  seeds = ([None] * len(leaves) if noise_seed is None
           else [noise_seed + i for i in range(len(leaves))])
  queries = [wrap(gaussian_query.GaussianSumQuery(float(c), float(s), seed,
                                                  secure_mode))
             for c, s, seed in zip(clips, stddevs, seeds)]
  return nested_query.NestedQuery(tf.nest.pack_sequence_as(template, queries))
