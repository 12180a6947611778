"""Argument checks shared by the accountants: the one vocabulary for analysis.

Every check raises ``ValueError`` naming the argument and the value received
and stating the domain, so that a wrong call never yields a silently wrong
epsilon (nor NaN, ``ZeroDivisionError`` or ``OverflowError``). Messages read
``"<name> must be <domain>; got <value>."``, as in ``tf_dp.dp_query._checks``.
Booleans are refused wherever a number is expected (``q=True`` is a bug,
not a probability of 1).
"""

import math
import numbers

import numpy as np

# Renyi orders above this (other than inf) are refused: the RDP curve is
# flat in epsilon there, and the exact sums would need that many terms.
MAX_ORDER = 1e6


def _is_real(value):
  return isinstance(value, numbers.Real) and not isinstance(
      value, (bool, np.bool_))


def _is_int(value):
  return isinstance(value, numbers.Integral) and not isinstance(
      value, (bool, np.bool_))


def check_real(name, value, low=-math.inf, high=math.inf, low_open=False,
               high_open=False, allow_inf=True):
  """Checks that ``value`` is a real number (not NaN) in the given interval."""
  ok = _is_real(value) and not math.isnan(value)
  if ok and not allow_inf and math.isinf(value):
    ok = False
  if ok:
    ok = (value > low if low_open else value >= low) and (
        value < high if high_open else value <= high)
  if not ok:
    lo = "(" if low_open else "["
    hi = ")" if high_open else "]"
    kind = "a real number" if allow_inf else "a finite real number"
    raise ValueError(
        f"{name} must be {kind} in {lo}{low:g}, {high:g}{hi}; got {value!r}.")
  return float(value)


def check_probability(name, value):
  """Checks that ``value`` is a real number in [0, 1]."""
  if not _is_real(value) or not 0.0 <= value <= 1.0:
    raise ValueError(
        f"{name} must be a probability in [0, 1]; got {value!r}.")
  return float(value)


def check_noise_multiplier(name, value, allow_zero=False):
  """Checks that ``value`` is a positive (or, if allowed, zero) real.

  ``inf`` is allowed: infinite noise releases nothing (epsilon 0).
  """
  ok = _is_real(value) and not math.isnan(value)
  ok = ok and (value >= 0 if allow_zero else value > 0)
  if not ok:
    bound = ">= 0" if allow_zero else "> 0"
    raise ValueError(
        f"{name} must be a real number {bound} (the ratio of the noise "
        f"stddev to the L2 clip norm); got {value!r}.")
  return float(value)


def check_delta(name, value, allow_zero=False):
  """Checks that ``value`` lies in (0, 1), or in [0, 1] if ``allow_zero``."""
  if allow_zero:
    ok = _is_real(value) and 0.0 <= value <= 1.0
    domain = "[0, 1]"
  else:
    ok = _is_real(value) and 0.0 < value < 1.0
    domain = "(0, 1)"
  if not ok:
    raise ValueError(f"{name} must lie in {domain}; got {value!r}.")
  return float(value)


def check_epsilon(name, value, allow_zero=True):
  """Checks that ``value`` is a real >= 0 (> 0 unless ``allow_zero``)."""
  ok = _is_real(value) and not math.isnan(value)
  ok = ok and (value >= 0 if allow_zero else value > 0)
  if not ok:
    bound = ">= 0" if allow_zero else "> 0"
    raise ValueError(f"{name} must be a real number {bound}; got {value!r}.")
  return float(value)


def check_steps(name, value):
  """Checks that ``value`` is a non-negative integer."""
  if not _is_int(value) or value < 0:
    raise ValueError(f"{name} must be an integer >= 0; got {value!r}.")
  return int(value)


def check_positive_int(name, value):
  """Checks that ``value`` is an integer >= 1."""
  if not _is_int(value) or value < 1:
    raise ValueError(f"{name} must be an integer >= 1; got {value!r}.")
  return int(value)


def check_epochs(name, value):
  """Checks that ``value`` is a finite real > 0 (passes over the data).

  ``inf`` is refused: an infinite run has no finite number of steps to
  account; ask for the epsilon of a finite run instead.
  """
  if (not _is_real(value) or math.isnan(value) or math.isinf(value)
      or value <= 0):
    raise ValueError(
        f"{name} must be a finite real number > 0 (passes over the data); "
        f"got {value!r}.")
  return float(value)


def check_dataset(n, batch_size):
  """Checks ``n`` (records, >= 1) and ``batch_size`` (1 <= batch_size <= n).

  Returns:
    ``(n, batch_size)`` as ints, so that ``batch_size / n`` is a valid
    sampling ratio (no ``ZeroDivisionError`` at ``n=0``).
  """
  n = check_positive_int("n", n)
  batch_size = check_positive_int("batch_size", batch_size)
  if batch_size > n:
    raise ValueError(
        f"batch_size must not exceed the dataset size n={n}; got "
        f"batch_size={batch_size}.")
  return n, batch_size


def check_choice(name, value, choices):
  """Checks that ``value`` is one of ``choices`` (a tuple of strings)."""
  if not isinstance(value, str) or value not in choices:
    raise ValueError(f"{name} must be one of {tuple(choices)}; got {value!r}.")
  return value


def check_orders(orders):
  """Returns ``orders`` as a 1-D float array of Renyi orders > 1 (inf allowed).

  Finite orders must be at most ``MAX_ORDER``.
  """
  if np.isscalar(orders):
    orders = [orders]
  try:
    if any(isinstance(o, (bool, np.bool_)) for o in orders):
      raise TypeError("bool")
    arr = np.asarray(orders, dtype=float)
  except (TypeError, ValueError):
    raise ValueError(
        f"orders must be a list of real Renyi orders > 1; got {orders!r}."
    ) from None
  if arr.ndim != 1 or arr.size == 0:
    raise ValueError(
        f"orders must be a non-empty list of Renyi orders > 1; got {orders!r}.")
  if np.any(np.isnan(arr)) or np.any(arr <= 1):
    raise ValueError(f"orders must all be > 1; got {orders!r}.")
  finite = arr[np.isfinite(arr)]
  if np.any(finite > MAX_ORDER):
    raise ValueError(
        f"orders must be <= {MAX_ORDER:g} (or inf for pure DP); got "
        f"{float(np.max(finite))!r}. Orders that large never give a smaller "
        "epsilon; drop them.")
  return arr
