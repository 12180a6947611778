"""Constructor argument checks with messages that name the argument."""

import math
import numbers


def non_negative(name, value, hint=""):
  """Returns ``value`` as a float, or raises a ValueError naming ``name``."""
  if (isinstance(value, bool) or not isinstance(value, numbers.Real)
      or math.isnan(value) or value < 0 or math.isinf(value)):
    raise ValueError(
        f"{name} must be a finite real number >= 0; got {value!r}.{hint}")
  return float(value)


def positive(name, value, hint=""):
  value = non_negative(name, value, hint)
  if value == 0:
    raise ValueError(f"{name} must be > 0; got 0.{hint}")
  return value
