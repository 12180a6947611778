r"""Calibration: the noise, batch size or epochs that meet a target epsilon.

The searches of McMahan & Andrew (2018), Section 4: epsilon is monotone in
each knob, so ``search.monotone_boundary`` (doubling, then bisection) with
the accountant finds the value that meets a target (epsilon, delta). Every
result is conservative: the returned setting achieves an epsilon at or
below the target by the chosen accountant (``"pld"`` by default, or
``"rdp"``; see ``dp_sgd_privacy``).
The command-line form is ``tf_dp-compute-noise-multiplier`` (``tf_dp.cli``).
"""

import math
from typing import Optional, Tuple

from tf_dp.analysis import checks
from tf_dp.analysis import dp_sgd_privacy as privacy_lib
from tf_dp.analysis import pld as pld_lib
from tf_dp.analysis import search
from tf_dp.sampling import Sampling

MAX_NOISE_MULTIPLIER = 1e4
MAX_STEPS = 10 ** 9


def _epsilon_fn(n, delta, sampling, conversion, accountant):
  """eps(batch_size, noise_multiplier, epochs) under one accountant."""
  accountant = privacy_lib.resolve_accountant(accountant,
                                              conversion=conversion)
  sampling = pld_lib.canonical_sampling(sampling)

  def eps(batch_size, noise_multiplier, epochs):
    return privacy_lib.compute_dp_sgd_privacy(
        n, batch_size, noise_multiplier, epochs, delta, sampling=sampling,
        conversion=conversion, accountant=accountant)[0]
  return eps


def compute_noise_multiplier(n: int, batch_size: int, target_epsilon: float,
                             epochs: float, delta: float,
                             sampling: str = Sampling.POISSON,
                             conversion: Optional[str] = None,
                             tolerance: float = 1e-3,
                             accountant: Optional[str] = None) -> float:
  """Smallest noise multiplier (to ``tolerance``) with epsilon <= target.

  Privacy contract: training with the returned noise multiplier, the given
  batch size, sampling scheme and epochs satisfies (target_epsilon, delta)-DP
  by the chosen accountant.

  Args:
    n: As in ``compute_dp_sgd_privacy``.
    batch_size: As in ``compute_dp_sgd_privacy``.
    epochs: As in ``compute_dp_sgd_privacy``.
    delta: As in ``compute_dp_sgd_privacy``.
    sampling: As in ``compute_dp_sgd_privacy``.
    target_epsilon: The epsilon to meet, > 0.
    conversion: RDP only (see ``compute_dp_sgd_privacy``).
    tolerance: Relative precision of the answer, in (0, 1).
    accountant: ``"pld"``, ``"rdp"`` or None (see ``compute_dp_sgd_privacy``).

  Returns:
    The noise multiplier z: epsilon(z) <= target and
    epsilon(z (1 - tolerance)) > target.

  Raises:
    ValueError: on invalid arguments (``tolerance`` included: 0, negative
      or NaN would never stop), or if even a noise multiplier of 1e4
      cannot meet the target.

  Example:
    >>> z = compute_noise_multiplier(60000, 256, 3.0, 60, 1e-5)  # ~0.98
  """
  target_epsilon = checks.check_epsilon("target_epsilon", target_epsilon,
                                        allow_zero=False)
  tolerance = checks.check_tolerance("tolerance", tolerance)
  eps = _epsilon_fn(n, delta, sampling, conversion, accountant)
  _, hi = search.monotone_boundary(
      lambda z: eps(batch_size, z, epochs) > target_epsilon,
      start=0.0, limit=MAX_NOISE_MULTIPLIER, integer=False,
      tolerance=tolerance)
  if hi is None:
    raise ValueError(
        f"target_epsilon={target_epsilon} cannot be reached with "
        f"noise_multiplier <= {MAX_NOISE_MULTIPLIER:g} for this run; train "
        "fewer epochs or use a smaller batch.")
  return hi


def compute_epochs(n: int, batch_size: int, noise_multiplier: float,
                   target_epsilon: float, delta: float,
                   sampling: str = Sampling.POISSON,
                   conversion: Optional[str] = None,
                   accountant: Optional[str] = None) -> Tuple[float, float]:
  """Largest number of whole steps, in epochs, with epsilon <= target.

  Returns ``(epochs, steps)``; ``epochs = steps * batch_size / n``;
  ``(0.0, 0)`` if one step already exceeds the target and
  ``(inf, inf)`` beyond 10^9 steps.
  """
  n, batch_size = checks.check_dataset(n, batch_size)
  target_epsilon = checks.check_epsilon("target_epsilon", target_epsilon)
  eps = _epsilon_fn(n, delta, sampling, conversion, accountant)
  per_step = batch_size / n

  def ok(steps):
    return eps(batch_size, noise_multiplier, steps * per_step) <= (
        target_epsilon)

  if not ok(1):
    return 0.0, 0
  lo, hi = search.monotone_boundary(ok, start=1, limit=MAX_STEPS)
  if hi is None:
    return math.inf, math.inf
  return lo * per_step, lo


def compute_batch_size(n: int, noise_multiplier: float, target_epsilon: float,
                       epochs: float, delta: float,
                       sampling: str = Sampling.POISSON,
                       conversion: Optional[str] = None,
                       accountant: Optional[str] = None) -> int:
  """Largest batch size with epsilon <= target at fixed epochs.

  At fixed epochs a larger batch means a larger sampling rate and fewer
  steps; epsilon grows with the batch size in the DP-SGD regime, so a
  bisection over integers applies. Returns 0 if even batch size 1 fails.
  """
  target_epsilon = checks.check_epsilon("target_epsilon", target_epsilon)
  n = checks.check_positive_int("n", n)
  eps = _epsilon_fn(n, delta, sampling, conversion, accountant)

  def ok(b):
    return eps(b, noise_multiplier, epochs) <= target_epsilon

  if not ok(1):
    return 0
  return int(search.monotone_boundary(ok, start=1, limit=n)[0])
