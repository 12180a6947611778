"""Clip and noise allocation strategies (McMahan & Andrew 2018, Sec. 2 and 4).

Given G groups (e.g. layers) of dimensions d_g, D = sum d_g, a total L2
bound S* and a target noise multiplier z:

Clipping:
  * ``flat``: one group, S*.
  * ``per_layer``: S_g = S* / sqrt(G).
  * ``dimension_adjusted``: S_g = S* sqrt(d_g / D). The paper prints
    ``S*/sqrt(d_g/D)``; that would make sum_g S_g^2 = S*^2 sum_g D/d_g, larger
    than the total bound S*, so we read it as S* sqrt(d_g/D), for which
    sum_g S_g^2 = S*^2 as for the other two strategies.
Noise (stddev of the noise added to each group's sum):
  * ``proportional``: sigma_g = z sqrt(G) S_g.
  * ``dimensionality_adjusted``: sigma_g = z sqrt(D / d_g) S_g.
Both make the effective noise multiplier of eq. (1) equal to z:
  z_eff = (sum_g (S_g / sigma_g)^2)^(-1/2).
"""

import math

import numpy as np
import tensorflow as tf

from tf_dp.dp_query import _checks
from tf_dp.dp_query import gaussian_query
from tf_dp.dp_query import nested_query
from tf_dp.dp_query import normalized_query

CLIPPING_STRATEGIES = ("flat", "per_layer", "dimension_adjusted")
NOISE_STRATEGIES = ("proportional", "dimensionality_adjusted")


def group_clips(total_l2_norm_clip, dims, strategy):
  """Per-group clip norms S_g for the given strategy."""
  total = _checks.positive("total_l2_norm_clip", total_l2_norm_clip)
  dims = np.asarray(dims, dtype=float)
  if strategy == "flat":
    return [total]
  if strategy == "per_layer":
    return [total / math.sqrt(len(dims))] * len(dims)
  if strategy == "dimension_adjusted":
    return list(total * np.sqrt(dims / dims.sum()))
  raise ValueError(f"clipping strategy must be one of {CLIPPING_STRATEGIES}; "
                   f"got {strategy!r}.")


def group_stddevs(noise_multiplier, clips, dims, strategy):
  """Per-group noise stddevs sigma_g for the given strategy."""
  z = _checks.non_negative("noise_multiplier", noise_multiplier)
  clips = np.asarray(clips, dtype=float)
  dims = np.asarray(dims, dtype=float)
  if strategy == "proportional":
    return list(z * math.sqrt(len(clips)) * clips)
  if strategy == "dimensionality_adjusted":
    return list(z * np.sqrt(dims.sum() / dims) * clips)
  raise ValueError(f"noise strategy must be one of {NOISE_STRATEGIES}; "
                   f"got {strategy!r}.")


def effective_noise_multiplier(clips, stddevs):
  """Eq. (1): the single-query noise multiplier of G Gaussian sum queries.

  Groups with clip 0 release nothing and are ignored; a group with clip > 0
  and no noise makes the result 0 (no privacy).
  """
  total = 0.0
  for s, sigma in zip(clips, stddevs):
    if s == 0:
      continue
    if sigma == 0:
      return 0.0
    total += (s / sigma) ** 2
  return math.inf if total == 0 else total ** -0.5


def build_query(template, l2_norm_clip, noise_multiplier, clipping="flat",
                noise="proportional", denominator=None, noise_seed=None,
                secure_mode=False):
  """A query for records shaped like ``template`` under a strategy.

  Each leaf of ``template`` (e.g. each trainable variable) is a group for
  the ``per_layer`` and ``dimension_adjusted`` strategies.

  Privacy contract: the effective noise multiplier (eq. 1) of the returned
  query is ``noise_multiplier`` for every strategy, with total L2 bound
  ``l2_norm_clip``. ``noise_seed`` and ``secure_mode`` are passed to every
  ``GaussianSumQuery`` (see its docstring).

  Returns:
    A ``GaussianSumQuery`` (flat) or ``NestedQuery`` of them, each wrapped in
    a ``NormalizedQuery`` if ``denominator`` is given.
  """
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
