"""Epsilon of a DP-SGD training run from its hyperparameters.

Two accountants are offered: ``"pld"`` (the default; privacy loss
distributions, ``tf_dp.analysis.pld``: the tightest epsilon, an upper bound
up to a grid spacing of 1e-4 in the privacy loss) and ``"rdp"`` (Renyi DP,
``tf_dp.analysis.rdp``: a looser upper bound, kept for comparison with
published figures and for its orders / conversion options).

The command-line form is ``tf_dp-compute-dp-sgd-privacy`` (``tf_dp.cli``).
"""

import math
from typing import Optional, Tuple

import numpy as np

from tf_dp.analysis import checks
from tf_dp.analysis import conversion as conversion_lib
from tf_dp.analysis import pld as pld_lib
from tf_dp.analysis import rdp as rdp_lib
from tf_dp.analysis import rdp_fixed_size
from tf_dp.sampling import Sampling

ACCOUNTANTS = ("pld", "rdp")
DEFAULT_ACCOUNTANT = "pld"


def resolve_accountant(accountant: Optional[str], **rdp_options: object) -> str:
  """The accountant to use: ``accountant``, or the default if it is None.

  ``rdp_options`` are the RDP-only arguments a caller passed (``orders``,
  ``conversion``): given with ``accountant=None`` they select ``"rdp"`` (a
  caller asking for an order list wants RDP); given with ``"pld"`` they
  are an error naming the argument.
  """
  given = sorted(k for k, v in rdp_options.items() if v is not None)
  if accountant is None:
    return "rdp" if given else DEFAULT_ACCOUNTANT
  checks.check_choice("accountant", accountant, ACCOUNTANTS)
  if accountant == "pld" and given:
    raise ValueError(f"{given[0]} applies to accountant='rdp' only; got "
                     f"{given[0]}={rdp_options[given[0]]!r} with "
                     "accountant='pld'.")
  return accountant


def dp_sgd_steps(n: int, batch_size: int, epochs: float) -> int:
  """Number of steps of ``epochs`` passes: ceil(epochs * n / batch_size)."""
  return int(math.ceil(epochs * n / batch_size - 1e-9))


def dp_sgd_rdp(sampling_probability: float, noise_multiplier: float, steps: int,
               orders: checks.FloatArray, sampling: str) -> np.ndarray:
  """RDP curve of ``steps`` DP-SGD steps under the given sampling scheme."""
  sampling = pld_lib.canonical_sampling(sampling)
  if sampling is Sampling.POISSON:
    return rdp_lib.compute_rdp(sampling_probability, noise_multiplier, steps,
                               orders)
  return rdp_fixed_size.compute_rdp_fixed_size(
      sampling_probability, noise_multiplier, steps, orders)


def compute_dp_sgd_privacy(
    n: int, batch_size: int, noise_multiplier: float, epochs: float,
    delta: float, sampling: str = Sampling.POISSON,
    conversion: Optional[str] = None,
    orders: Optional[checks.FloatArray] = None, accountant: Optional[str] = None
) -> Tuple[float, float]:
  """Epsilon of DP-SGD for ``epochs`` passes over ``n`` records.

  Privacy contract: each step samples records with probability
  ``q = batch_size / n`` (``sampling="poisson"``, add/remove-one neighbours)
  or draws a fixed-size batch without replacement
  (``sampling="fixed_size"``, replace-one neighbours), clips each
  record's gradient to norm C and adds N(0, (noise_multiplier C)^2) to the
  sum. ``ceil(epochs * n / batch_size)`` steps are composed. The returned
  epsilon is an upper bound on the epsilon of that run at ``delta``.

  Args:
    n: Number of records in the training set.
    batch_size: Expected (Poisson) or exact batch size.
    noise_multiplier: Noise stddev divided by the clip norm.
    epochs: Passes over the data (may be fractional).
    delta: Target delta, in (0, 1); 1/n or smaller is customary.
    sampling: ``"poisson"`` or ``"fixed_size"``.
    conversion: RDP only: ``"tight"`` (default) or ``"classic"``
      RDP-to-DP conversion.
    orders: RDP only: Renyi orders; the package default if None.
    accountant: ``"pld"`` or ``"rdp"``; None means ``"pld"`` unless
      ``conversion`` or ``orders`` is given (then ``"rdp"``).

  Returns:
    ``(epsilon, optimal_order)``; the order is ``nan`` for PLD.

  Raises:
    ValueError: on an invalid argument (named in the message).

  Example:
    >>> eps, _ = compute_dp_sgd_privacy(60000, 256, 1.1, 60, 1e-5)  # 2.38
    >>> eps, order = compute_dp_sgd_privacy(60000, 256, 1.1, 60, 1e-5,
    ...                                     accountant="rdp")  # 2.60, 8
  """
  accountant = resolve_accountant(accountant, conversion=conversion,
                                  orders=orders)
  n, batch_size = checks.check_dataset(n, batch_size)
  epochs = checks.check_epochs("epochs", epochs)
  delta = checks.check_delta("delta", delta)
  noise_multiplier = checks.check_noise_multiplier(
      "noise_multiplier", noise_multiplier)
  sampling = pld_lib.canonical_sampling(sampling)
  steps = dp_sgd_steps(n, batch_size, epochs)
  if accountant == "pld":
    return pld_lib.dp_sgd_pld_epsilon(batch_size / n, noise_multiplier,
                                      steps, delta, sampling), math.nan
  orders = rdp_lib.DEFAULT_ORDERS if orders is None else orders
  rdp = dp_sgd_rdp(batch_size / n, noise_multiplier, steps, orders, sampling)
  eps, _, order = conversion_lib.get_privacy_spent(
      orders, rdp, target_delta=delta, conversion=conversion or "tight")
  return eps, order
