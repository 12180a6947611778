"""Conversion of an RDP curve to an (epsilon, delta)-DP guarantee.

Two conversions are offered:

* ``"tight"`` (default): Balle, Barthe, Gaboardi, Hsu & Sato (2020),
  "Hypothesis testing interpretations and Renyi differential privacy",
  Thm. 21, equivalently Canonne, Kamath & Steinke (2020), Prop. 12:
  ``eps = rdp + log((a-1)/a) - (log(delta) + log(a)) / (a-1)``.
* ``"classic"``: Mironov (2017), Prop. 3:
  ``eps = rdp + log(1/delta) / (a-1)``. Published DP-SGD figures (Abadi et
  al. 2016's 1.26, the TF Privacy README's 2.92) use this one.

Both are valid upper bounds on epsilon; the minimum over the given orders is
returned. When that minimum sits at the smallest or largest order a warning
is issued, since a wider order list may give a smaller epsilon. An RDP of
exactly 0 at some order (nothing released, e.g. infinite noise or no steps)
means identical output distributions and gives epsilon = 0 and delta = 0.
"""

import math
import warnings
from typing import Optional, Tuple

import numpy as np

from tf_dp.analysis import checks

CONVERSIONS = ("tight", "classic")


def _check_rdp(orders, rdp):
  orders = checks.check_orders(orders)
  try:
    rdp = np.atleast_1d(np.asarray(rdp, dtype=float))
  except (TypeError, ValueError):
    raise ValueError(f"rdp must be real numbers, one per order; got {rdp!r}."
                     ) from None
  if rdp.shape != orders.shape:
    raise ValueError(
        f"rdp must have one value per order: {len(orders)} orders but rdp "
        f"has shape {rdp.shape}.")
  if np.any(np.isnan(rdp)) or np.any(rdp < 0):
    raise ValueError(f"rdp values must be >= 0 and not NaN; got {rdp!r}.")
  return orders, rdp


def _epsilons(orders, rdp, delta, conversion):
  with np.errstate(invalid="ignore", over="ignore"):
    if conversion == "tight":
      eps = (rdp + np.log1p(-1.0 / orders)
             - (math.log(delta) + np.log(orders)) / (orders - 1.0))
    else:
      eps = rdp + math.log(1.0 / delta) / (orders - 1.0)
  eps = np.where(np.isinf(orders), rdp, eps)  # order inf: pure DP.
  # RDP 0 at an order > 1 means identical output distributions: (0, 0)-DP.
  eps = np.where(rdp == 0, 0.0, eps)
  return np.maximum(eps, 0.0)


def _log_deltas(orders, rdp, epsilon, conversion):
  with np.errstate(invalid="ignore", over="ignore"):
    if conversion == "tight":
      log_delta = ((orders - 1.0) * (rdp - epsilon + np.log1p(-1.0 / orders))
                   - np.log(orders))
    else:
      log_delta = (orders - 1.0) * (rdp - epsilon)
  finite = np.isfinite(orders)
  pure = np.where(rdp <= epsilon, -np.inf, 0.0)  # order inf: pure DP.
  log_delta = np.where(finite, np.nan_to_num(log_delta, nan=np.inf), pure)
  return np.where(rdp == 0, -np.inf, log_delta)  # identical distributions


def _warn_if_edge(orders, index, what):
  if len(orders) > 1 and index in (0, len(orders) - 1):
    side = "smallest" if index == 0 else "largest"
    warnings.warn(
        f"The optimal Renyi order for {what} is the {side} order in the list "
        f"({orders[index]}); extend the orders on that side for a possibly "
        f"tighter bound.", RuntimeWarning, stacklevel=3)


def get_privacy_spent(orders: checks.FloatArray, rdp: checks.FloatArray,
                      target_eps: Optional[float] = None,
                      target_delta: Optional[float] = None,
                      conversion: str = "tight") -> Tuple[float, float, float]:
  """Converts RDP to (epsilon, delta)-DP; give exactly one target.

  Args:
    orders: Renyi orders (> 1) at which ``rdp`` was computed.
    rdp: RDP values, one per order (total over all steps).
    target_eps: If given, the delta achieved for this epsilon is computed.
    target_delta: If given, the epsilon achieved for this delta is computed.
    conversion: ``"tight"`` (default) or ``"classic"`` (see module doc).

  Returns:
    ``(epsilon, delta, optimal_order)``.

  Raises:
    ValueError: if both or neither target is given, or an argument is out
      of its domain.
  """
  if (target_eps is None) == (target_delta is None):
    raise ValueError(
        "Give exactly one of target_eps and target_delta; got "
        f"target_eps={target_eps!r}, target_delta={target_delta!r}.")
  conversion = checks.check_choice("conversion", conversion,
                                   CONVERSIONS)
  orders, rdp = _check_rdp(orders, rdp)
  if target_delta is not None:
    delta = checks.check_delta("target_delta", target_delta)
    eps = _epsilons(orders, rdp, delta, conversion)
    index = int(np.argmin(eps))
    if np.isfinite(eps[index]) and eps[index] > 0:
      _warn_if_edge(orders, index, "epsilon")
    return float(eps[index]), delta, float(orders[index])
  epsilon = checks.check_epsilon("target_eps", target_eps)
  log_delta = _log_deltas(orders, rdp, epsilon, conversion)
  index = int(np.argmin(log_delta))
  if np.isfinite(log_delta[index]):
    _warn_if_edge(orders, index, "delta")
  delta = float(min(1.0, math.exp(min(log_delta[index], 0.0))))
  return epsilon, delta, float(orders[index])
