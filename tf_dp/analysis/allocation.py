"""Eq. (1) of McMahan & Andrew (2018): several Gaussian sum queries as one.

A sample whose records are split into G groups (e.g. layers), group g
clipped to L2 norm S_g and noised with stddev sigma_g, is the Gaussian
mechanism of one query with noise multiplier

    z = (sum_g (S_g / sigma_g)^2)^(-1/2).

This is the one home of that formula: the mechanisms' clip and noise
allocation strategies (``tf_dp.dp_query.allocation``) and the ledger's
accountant (``tf_dp.analysis.ledger``) both call it. Pure Python.
"""

import math
from typing import Sequence

from tf_dp.analysis import checks


def effective_noise_multiplier(clips: Sequence[float],
                               stddevs: Sequence[float]) -> float:
  """Eq. (1): the single-query noise multiplier of G Gaussian sum queries.

  Privacy contract: releasing every group's noised sum together is exactly
  as private as one Gaussian sum query with the returned noise multiplier
  (noise stddev over L2 sensitivity).

  Args:
    clips: The groups' L2 clip norms S_g, reals >= 0 (``inf`` allowed).
    stddevs: The groups' noise stddevs sigma_g, reals >= 0 (``inf``
      allowed), one per clip.

  Returns:
    z >= 0. Groups with clip 0, or with infinite noise and a finite clip,
    release nothing and are left out; if nothing private is released the
    result is ``inf``. A group with a non-zero clip and no noise (or an
    infinite clip) makes it 0: no privacy.

  Raises:
    ValueError: naming the entry if a clip or stddev is negative or NaN,
      or if the two lists differ in length.

  Example:
    >>> effective_noise_multiplier([1.0, 0.5], [2.0, 3.0])  # 1.897
  """
  clips, stddevs = list(clips), list(stddevs)
  if len(clips) != len(stddevs):
    raise ValueError(f"clips and stddevs must have one entry per group; got "
                     f"{len(clips)} clips and {len(stddevs)} stddevs.")
  total = 0.0
  for i, (clip, stddev) in enumerate(zip(clips, stddevs)):
    clip = checks.check_real(f"clips[{i}]", clip, low=0.0)
    stddev = checks.check_real(f"stddevs[{i}]", stddev, low=0.0)
    if clip == 0 or (math.isinf(stddev) and not math.isinf(clip)):
      continue
    if stddev == 0 or math.isinf(clip):
      return 0.0
    total += (clip / stddev) ** 2
  return math.inf if total == 0 else total ** -0.5
