"""Argument checks: the one vocabulary for every tf_dp module.

Used by the accountants, the mechanisms (``tf_dp.dp_query``), the ledger
and the samplers, so that a bad argument gets the same kind of error
wherever it is passed. Every check raises ``ValueError`` with a message
``"<name> must be <domain>; got <value>.<hint>"``: it names the argument
and the value received and states the domain; ``hint`` (optional, starting
with a space) says how to fix the call. A wrong call thus never yields a
silently wrong epsilon (nor NaN, ``ZeroDivisionError`` or
``OverflowError``). Booleans are refused wherever a number is expected
(``sampling_probability=True`` is a bug, not a probability of 1); numpy
scalars and 0-d arrays are accepted like Python numbers.

Pure Python (numpy only): no TensorFlow.
"""

import math
import numbers
from typing import Any, Iterable, Sequence, Tuple, Union

import numpy as np

# Real numbers, one per Renyi order (or per event): a list or an array.
FloatArray = Union[Sequence[float], np.ndarray]

# Renyi orders above this (other than inf) are refused: the RDP curve is
# flat in epsilon there, and the exact sums would need that many terms.
MAX_ORDER = 1e6


def _scalar(value):
  """A 0-d numpy array as its Python scalar; anything else unchanged."""
  if isinstance(value, np.ndarray) and value.ndim == 0:
    return value.item()
  return value


def is_real(value: Any) -> bool:
  """True for a real number (not a bool); NaN and inf included."""
  value = _scalar(value)
  return isinstance(value, numbers.Real) and not isinstance(
      value, (bool, np.bool_))


def is_int(value: Any) -> bool:
  """True for an integer (not a bool)."""
  value = _scalar(value)
  return isinstance(value, numbers.Integral) and not isinstance(
      value, (bool, np.bool_))


def _is_tensorflow_value(value):
  """A TensorFlow tensor or variable (checked by its type's module: this
  module does not import TensorFlow)."""
  return type(value).__module__.split(".")[0] in ("tensorflow", "keras",
                                                  "tf_keras")


def _fail(name, domain, value, hint=""):
  if _is_tensorflow_value(value):
    hint += (f" {name} is fixed when it is given (the ledger and the "
             f"accountants read it as a number), so a TensorFlow tensor or "
             f"variable is not taken: pass a Python number (float(value) of "
             f"an eager tensor). A clipping norm that adapts during "
             f"training is tf_dp.dp_query.QuantileAdaptiveClipSumQuery.")
  raise ValueError(f"{name} must be {domain}; got {value!r}.{hint}")


def check_real(name: str, value: Any, low: float = -math.inf,
               high: float = math.inf, low_open: bool = False,
               high_open: bool = False, allow_inf: bool = True,
               hint: str = "") -> float:
  """Checks that ``value`` is a real number (not NaN) in the given interval."""
  ok = is_real(value) and not math.isnan(value)
  if ok and not allow_inf and math.isinf(value):
    ok = False
  if ok:
    ok = (value > low if low_open else value >= low) and (
        value < high if high_open else value <= high)
  if not ok:
    lo = "(" if low_open else "["
    hi = ")" if high_open else "]"
    kind = "a real number" if allow_inf else "a finite real number"
    if (low, high) != (-math.inf, math.inf):
      kind += f" in {lo}{low:g}, {high:g}{hi}"
    _fail(name, kind, value, hint)
  return float(value)


def check_non_negative(name: str, value: Any, hint: str = "") -> float:
  """Checks that ``value`` is a finite real number >= 0."""
  if not is_real(value) or math.isnan(value) or math.isinf(value) or (
      value < 0):
    _fail(name, "a finite real number >= 0", value, hint)
  return float(value)


def check_positive(name: str, value: Any, hint: str = "") -> float:
  """Checks that ``value`` is a finite real number > 0."""
  if not is_real(value) or math.isnan(value) or math.isinf(value) or (
      value <= 0):
    _fail(name, "a finite real number > 0", value, hint)
  return float(value)


def check_probability(name: str, value: Any, hint: str = "") -> float:
  """Checks that ``value`` is a real number in [0, 1]."""
  if not is_real(value) or not 0.0 <= value <= 1.0:
    _fail(name, "a probability in [0, 1]", value, hint)
  return float(value)


def check_sampling_probability(name: str, value: Any,
                               hint: str = "") -> float:
  """``check_probability`` for the probability that a record is in a lot.

  The message also names ``q``, the symbol of the formulas.
  """
  return check_probability(
      name, value, hint or " It is q, the probability that a record is in a "
      "lot (batch_size / n for fixed-size lots).")


def check_noise_multiplier(name: str, value: Any,
                           allow_zero: bool = False) -> float:
  """Checks that ``value`` is a positive (or, if allowed, zero) real.

  ``inf`` is allowed: infinite noise releases nothing (epsilon 0).
  """
  ok = is_real(value) and not math.isnan(value)
  ok = ok and (value >= 0 if allow_zero else value > 0)
  if not ok:
    bound = ">= 0" if allow_zero else "> 0"
    _fail(name, f"a real number {bound} (the ratio of the noise stddev to "
          "the L2 clip norm)", value)
  return float(value)


def check_delta(name: str, value: Any, allow_zero: bool = False) -> float:
  """Checks that ``value`` lies in (0, 1), or in [0, 1] if ``allow_zero``."""
  if allow_zero:
    ok = is_real(value) and 0.0 <= value <= 1.0
    domain = "[0, 1]"
  else:
    ok = is_real(value) and 0.0 < value < 1.0
    domain = "(0, 1)"
  if not ok:
    raise ValueError(f"{name} must lie in {domain}; got {value!r}.")
  return float(value)


def check_epsilon(name: str, value: Any, allow_zero: bool = True) -> float:
  """Checks that ``value`` is a real >= 0 (> 0 unless ``allow_zero``)."""
  ok = is_real(value) and not math.isnan(value)
  ok = ok and (value >= 0 if allow_zero else value > 0)
  if not ok:
    _fail(name, f"a real number {'>= 0' if allow_zero else '> 0'}", value)
  return float(value)


def _integral(value, integral_float):
  """``value`` as an int if it is an integer, or (if ``integral_float``) a
  float with an integer value such as 6e4; else None."""
  if is_int(value):
    return int(value)
  if (integral_float and is_real(value) and math.isfinite(value)
      and float(value).is_integer()):
    return int(value)
  return None


def check_steps(name: str, value: Any, hint: str = "",
                integral_float: bool = False) -> int:
  """Checks that ``value`` is a non-negative integer.

  ``integral_float=True`` also accepts floats with an integer value (JSON
  numbers such as 6e4).
  """
  as_int = _integral(value, integral_float)
  if as_int is None or as_int < 0:
    _fail(name, "an integer >= 0", value, hint)
  return as_int


def check_positive_int(name: str, value: Any, hint: str = "",
                       integral_float: bool = False) -> int:
  """Checks that ``value`` is an integer >= 1 (see ``check_steps``)."""
  as_int = _integral(value, integral_float)
  if as_int is None or as_int < 1:
    _fail(name, "an integer >= 1", value, hint)
  return as_int


def check_epochs(name: str, value: Any) -> float:
  """Checks that ``value`` is a finite real > 0 (passes over the data).

  ``inf`` is refused: an infinite run has no finite number of steps to
  account; ask for the epsilon of a finite run instead.
  """
  if (not is_real(value) or math.isnan(value) or math.isinf(value)
      or value <= 0):
    _fail(name, "a finite real number > 0 (passes over the data)", value)
  return float(value)


def check_dataset(n: Any, batch_size: Any) -> Tuple[int, int]:
  """Checks ``n`` (records, >= 1) and ``batch_size`` (1 <= batch_size <= n).

  Returns:
    ``(n, batch_size)`` as ints, so that ``batch_size / n`` is a valid
    sampling probability (no ``ZeroDivisionError`` at ``n=0``).
  """
  n = check_positive_int("n", n)
  batch_size = check_positive_int("batch_size", batch_size)
  if batch_size > n:
    raise ValueError(
        f"batch_size must not exceed the dataset size n={n}; got "
        f"batch_size={batch_size}.")
  return n, batch_size


def check_choice(name: str, value: Any, choices: Iterable[str]) -> Any:
  """Checks that ``value`` is one of ``choices`` (a tuple of strings)."""
  if not isinstance(value, str) or value not in choices:
    _fail(name, f"one of {tuple(choices)}", value)
  return value


def check_tolerance(name: str, value: Any) -> float:
  """Checks a relative tolerance: a finite real in (0, 1)."""
  if not is_real(value) or math.isnan(value) or not 0 < value < 1:
    _fail(name, "a real number in (0, 1)", value)
  return float(value)


def check_orders(orders: Any) -> np.ndarray:
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
