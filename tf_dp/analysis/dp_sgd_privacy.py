"""Epsilon of a DP-SGD training run from its hyperparameters.

The command-line form is ``python -m tf_dp.analysis.compute_dp_sgd_privacy``.
"""

import math

from tf_dp.analysis import _validation
from tf_dp.analysis import conversion as conversion_lib
from tf_dp.analysis import rdp as rdp_lib
from tf_dp.analysis import rdp_without_replacement

SAMPLINGS = ("poisson", "without_replacement")


def dp_sgd_steps(n, batch_size, epochs):
  """Number of steps of ``epochs`` passes: ceil(epochs * n / batch_size)."""
  return int(math.ceil(epochs * n / batch_size - 1e-9))


def _check_run(n, batch_size, epochs):
  n = _validation.check_positive_int("n", n)
  batch_size = _validation.check_positive_int("batch_size", batch_size)
  if batch_size > n:
    raise ValueError(
        f"batch_size ({batch_size}) must not exceed the dataset size n ({n}).")
  if not epochs > 0:
    raise ValueError(f"epochs must be > 0; got {epochs!r}.")
  return n, batch_size, float(epochs)


def dp_sgd_rdp(q, noise_multiplier, steps, orders, sampling):
  """RDP curve of ``steps`` DP-SGD steps under the given sampling scheme."""
  if sampling not in SAMPLINGS:
    raise ValueError(f"sampling must be one of {SAMPLINGS}; got {sampling!r}.")
  if sampling == "poisson":
    return rdp_lib.compute_rdp(q, noise_multiplier, steps, orders)
  return rdp_without_replacement.compute_rdp_sample_without_replacement(
      q, noise_multiplier, steps, orders)


def compute_dp_sgd_privacy(n, batch_size, noise_multiplier, epochs, delta,
                           sampling="poisson", conversion="tight",
                           orders=None):
  """Epsilon of DP-SGD for ``epochs`` passes over ``n`` records.

  Privacy contract: each step samples records with probability
  ``q = batch_size / n`` (``sampling="poisson"``, add/remove-one neighbours)
  or draws a fixed-size batch without replacement
  (``sampling="without_replacement"``, replace-one neighbours), clips each
  record's gradient to norm C and adds N(0, (noise_multiplier C)^2) to the
  sum. ``ceil(epochs * n / batch_size)`` steps are composed.

  Args:
    n: Number of records in the training set.
    batch_size: Expected (Poisson) or exact batch size.
    noise_multiplier: Noise stddev divided by the clip norm.
    epochs: Passes over the data (may be fractional).
    delta: Target delta, in (0, 1); 1/n or smaller is customary.
    sampling: ``"poisson"`` or ``"without_replacement"``.
    conversion: ``"tight"`` or ``"classic"`` RDP-to-DP conversion.
    orders: Renyi orders; the package default if None.

  Returns:
    ``(epsilon, optimal_order)``.

  Example:
    >>> eps, order = compute_dp_sgd_privacy(60000, 256, 1.1, 60, 1e-5)
  """
  n, batch_size, epochs = _check_run(n, batch_size, epochs)
  delta = _validation.check_delta("delta", delta)
  noise_multiplier = _validation.check_noise_multiplier(
      "noise_multiplier", noise_multiplier)
  orders = rdp_lib.DEFAULT_ORDERS if orders is None else orders
  steps = dp_sgd_steps(n, batch_size, epochs)
  rdp = dp_sgd_rdp(batch_size / n, noise_multiplier, steps, orders, sampling)
  eps, _, order = conversion_lib.get_privacy_spent(
      orders, rdp, target_delta=delta, conversion=conversion)
  return eps, order
