"""Module-level redirects for the two ``tf_dp.keras`` modules that moved
(``tf_dp.keras.compat``, ``tf_dp.keras.dpd``); each use warns with a
``DeprecationWarning`` that names the new name.

Pure Python: no TensorFlow.
"""

import importlib
import types
import warnings
from typing import Any, Callable, Mapping, Optional, Tuple


def warn(old: str, new: str, what: str = "name", stacklevel: int = 3) -> None:
  """Warns that ``old`` is deprecated in favour of ``new``."""
  warnings.warn(
      f"The {what} {old!r} is deprecated and will be removed in the next "
      f"release of tf_dp; use {new!r} instead.", DeprecationWarning,
      stacklevel=stacklevel)


def module_getattr(
    module_name: str, moved: Mapping[str, Tuple[str, Optional[str]]]
) -> Callable[[str], Any]:
  """A module ``__getattr__`` (PEP 562) for names that moved (warns).

  Args:
    module_name: The module's ``__name__`` (for the AttributeError).
    moved: ``{old name: (new module, new name)}``; the value is imported
      from the new module when first asked for.

  Returns:
    The function to assign to the module's ``__getattr__``.
  """
  def __getattr__(name):  # pylint: disable=invalid-name
    if name not in moved:
      raise AttributeError(
          f"module {module_name!r} has no attribute {name!r}")
    new_module, new_name = moved[name]
    warn(f"{module_name}.{name}", f"{new_module}.{new_name}", stacklevel=3)
    value = importlib.import_module(new_module)
    return value if new_name is None else getattr(value, new_name)
  return __getattr__


def moved_module(old_name: str,
                 new_module: types.ModuleType) -> types.ModuleType:
  """Warns that module ``old_name`` moved to ``new_module`` (a module).

  Call it from the old module's file and then replace the old module by
  the new one: ``sys.modules[__name__] = moved_module(__name__, new)``, so
  that both names are the same module object.
  """
  warn(old_name, new_module.__name__, "module", stacklevel=3)
  return new_module
