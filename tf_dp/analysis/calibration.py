r"""Calibration: the noise, batch size or epochs that meet a target epsilon.

The searches of McMahan & Andrew (2018), Section 4: epsilon is monotone in
each knob, so a bisection with the accountant finds the value that meets a
target (epsilon, delta). Every result is conservative: the returned setting
achieves an epsilon at or below the target.
The command-line form is ``python -m tf_dp.analysis.compute_noise_multiplier``.
"""

import math

from tf_dp.analysis import _validation
from tf_dp.analysis import dp_sgd_privacy as privacy_lib


def _eps(n, batch_size, noise_multiplier, epochs, delta, **kw):
  return privacy_lib.compute_dp_sgd_privacy(
      n, batch_size, noise_multiplier, epochs, delta, **kw)[0]


def compute_noise_multiplier(n, batch_size, target_epsilon, epochs, delta,
                             sampling="poisson", conversion="tight",
                             tolerance=1e-3):
  """Smallest noise multiplier (to ``tolerance``) with epsilon <= target.

  Privacy contract: training with the returned noise multiplier, the given
  batch size, sampling scheme and epochs satisfies (target_epsilon, delta)-DP
  by this package's accountant.

  Raises:
    ValueError: on invalid arguments, or if even a huge noise multiplier
      (1e4) cannot meet the target.
  """
  target_epsilon = _validation.check_epsilon("target_epsilon", target_epsilon)
  if target_epsilon == 0:
    raise ValueError("target_epsilon must be > 0; got 0.")
  kw = dict(sampling=sampling, conversion=conversion)
  lo, hi = 0.0, 1.0
  while _eps(n, batch_size, hi, epochs, delta, **kw) > target_epsilon:
    lo, hi = hi, 2 * hi
    if hi > 1e4:
      raise ValueError(
          f"target_epsilon={target_epsilon} cannot be reached with "
          f"noise_multiplier <= 1e4 for this run; train fewer epochs or use "
          f"a smaller batch.")
  while hi - lo > tolerance * hi:
    mid = (lo + hi) / 2
    if _eps(n, batch_size, mid, epochs, delta, **kw) > target_epsilon:
      lo = mid
    else:
      hi = mid
  return hi


def compute_epochs(n, batch_size, noise_multiplier, target_epsilon, delta,
                   sampling="poisson", conversion="tight"):
  """Largest number of whole steps, in epochs, with epsilon <= target.

  Returns ``(epochs, steps)``; ``epochs = steps * batch_size / n``.
  """
  target_epsilon = _validation.check_epsilon("target_epsilon", target_epsilon)
  kw = dict(sampling=sampling, conversion=conversion)
  per_step = batch_size / n

  def eps_of_steps(steps):
    return _eps(n, batch_size, noise_multiplier, steps * per_step, delta,
                **kw)

  if eps_of_steps(1) > target_epsilon:
    return 0.0, 0
  lo, hi = 1, 2
  while eps_of_steps(hi) <= target_epsilon:
    lo, hi = hi, hi * 2
    if hi > 10 ** 9:
      return math.inf, math.inf
  while hi - lo > 1:
    mid = (lo + hi) // 2
    if eps_of_steps(mid) <= target_epsilon:
      lo = mid
    else:
      hi = mid
  return lo * per_step, lo


def compute_batch_size(n, noise_multiplier, target_epsilon, epochs, delta,
                       sampling="poisson", conversion="tight"):
  """Largest batch size with epsilon <= target at fixed epochs.

  At fixed epochs a larger batch means a larger sampling rate and fewer
  steps; epsilon grows with the batch size in the DP-SGD regime, so a
  bisection over integers applies. Returns 0 if even batch size 1 fails.
  """
  target_epsilon = _validation.check_epsilon("target_epsilon", target_epsilon)
  kw = dict(sampling=sampling, conversion=conversion)

  def ok(b):
    return _eps(n, b, noise_multiplier, epochs, delta, **kw) <= target_epsilon

  if not ok(1):
    return 0
  lo, hi = 1, n
  if ok(n):
    return n
  while hi - lo > 1:
    mid = (lo + hi) // 2
    if ok(mid):
      lo = mid
    else:
      hi = mid
  return lo
