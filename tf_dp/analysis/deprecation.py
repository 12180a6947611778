"""Old names that keep working for one release, with a ``DeprecationWarning``.

tf_dp uses one name per concept (README, "Vocabulary"). A name that was
renamed keeps working for one release: keyword arguments
(``renamed_keywords``), string values (``renamed_value``), dict keys
(``RenamedKeysDict``), module attributes (``module_getattr``) and whole
modules (``moved_module``). Each use warns once per call site with a
``DeprecationWarning`` that names the new name, so the fix is a rename.

Pure Python: no TensorFlow.
"""

import functools
import importlib
import warnings


def warn(old, new, what="name", stacklevel=3):
  """Warns that ``old`` is deprecated in favour of ``new``."""
  warnings.warn(
      f"The {what} {old!r} is deprecated and will be removed in the next "
      f"release of tf_dp; use {new!r} instead.", DeprecationWarning,
      stacklevel=stacklevel)


def renamed_keywords(**old_to_new):
  """Decorator: accepts each old keyword argument as its new name (warns).

  Passing both the old and the new name is a ``TypeError``.

  Example:
    >>> @renamed_keywords(q="sampling_probability")
    ... def compute(sampling_probability): ...
  """
  def decorate(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
      for old, new in old_to_new.items():
        if old in kwargs:
          if new in kwargs:
            raise TypeError(f"{fn.__qualname__}() got both {new!r} and its "
                            f"deprecated name {old!r}; pass {new!r} only.")
          warn(old, new, "keyword argument")
          kwargs[new] = kwargs.pop(old)
      return fn(*args, **kwargs)
    return wrapper
  return decorate


def renamed_value(name, value, old_to_new, stacklevel=4):
  """``value``, or its new spelling if it is an old one (warns)."""
  if isinstance(value, str) and value in old_to_new:
    warn(f"{name}={value!r}", f"{name}={old_to_new[value]!r}", "value",
         stacklevel=stacklevel)
    return old_to_new[value]
  return value


class RenamedKeysDict(dict):
  """A dict that also answers each old key with the new key's value (warns).

  Only the new keys are stored (so ``json.dumps`` and ``==`` see them
  only); reading ``d[old]`` warns and returns ``d[new]``.
  """

  # Class attribute: {old key: new key}; set by subclasses.
  RENAMED = {}

  def __missing__(self, key):
    new = self.RENAMED.get(key)
    if new is None or new not in self:
      raise KeyError(key)
    warn(key, new, "key", stacklevel=3)
    return self[new]

  def __reduce__(self):
    return (type(self), (dict(self),))


def module_getattr(module_name, moved):
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


def moved_module(old_name, new_module):
  """Warns that module ``old_name`` moved to ``new_module`` (a module).

  Call it from the old module's file and then replace the old module by
  the new one: ``sys.modules[__name__] = moved_module(__name__, new)``, so
  that both names are the same module object.
  """
  warn(old_name, new_module.__name__, "module", stacklevel=3)
  return new_module
