"""Argument checks shared by the accountants.

Every check raises ``ValueError`` naming the argument and the value received,
so that a wrong call never yields a silently wrong epsilon.
"""

import math
import numbers

import numpy as np


def check_probability(name, value):
  """Checks that ``value`` is a real number in [0, 1]."""
  if not isinstance(value, numbers.Real) or not 0.0 <= value <= 1.0:
    raise ValueError(
        f"{name} must be a probability in [0, 1]; got {value!r}.")
  return float(value)


def check_noise_multiplier(name, value, allow_zero=False):
  """Checks that ``value`` is a positive (or, if allowed, zero) real."""
  ok = isinstance(value, numbers.Real) and not math.isnan(value)
  ok = ok and (value >= 0 if allow_zero else value > 0)
  if not ok:
    bound = ">= 0" if allow_zero else "> 0"
    raise ValueError(
        f"{name} must be a real number {bound} (the ratio of the noise "
        f"stddev to the L2 clip norm); got {value!r}.")
  return float(value)


def check_delta(name, value):
  """Checks that ``value`` lies in the open interval (0, 1)."""
  if not isinstance(value, numbers.Real) or not 0.0 < value < 1.0:
    raise ValueError(f"{name} must lie in (0, 1); got {value!r}.")
  return float(value)


def check_epsilon(name, value):
  """Checks that ``value`` is a non-negative real."""
  if (not isinstance(value, numbers.Real) or math.isnan(value)
      or value < 0):
    raise ValueError(f"{name} must be a real number >= 0; got {value!r}.")
  return float(value)


def check_steps(name, value):
  """Checks that ``value`` is a non-negative integer."""
  if (isinstance(value, bool) or not isinstance(value, numbers.Integral)
      or value < 0):
    raise ValueError(f"{name} must be an integer >= 0; got {value!r}.")
  return int(value)


def check_positive_int(name, value):
  """Checks that ``value`` is an integer >= 1."""
  if (isinstance(value, bool) or not isinstance(value, numbers.Integral)
      or value < 1):
    raise ValueError(f"{name} must be an integer >= 1; got {value!r}.")
  return int(value)


def check_orders(orders):
  """Returns ``orders`` as a 1-D float array of Renyi orders > 1 (inf allowed)."""
  if np.isscalar(orders):
    orders = [orders]
  arr = np.asarray(orders, dtype=float)
  if arr.ndim != 1 or arr.size == 0:
    raise ValueError(
        f"orders must be a non-empty list of Renyi orders > 1; got {orders!r}.")
  if np.any(np.isnan(arr)) or np.any(arr <= 1):
    raise ValueError(f"orders must all be > 1; got {orders!r}.")
  return arr
