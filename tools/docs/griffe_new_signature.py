"""A griffe extension for the docs build: a class constructed by ``__new__``.

``DPOptimizer`` takes its arguments in ``__new__`` (it returns the DP
optimizer of the wrapped optimizer's Keras flavour) and has no ``__init__``;
griffe reads a class's signature from ``__init__`` only. This extension gives
such a class an ``__init__`` with ``__new__``'s parameters (``cls`` left out),
so that the reference shows the real signature and checks the docstring's
arguments against it.
"""

import griffe


class NewSignature(griffe.Extension):
  """Copies ``__new__``'s parameters to a class without ``__init__``."""

  def on_class_members(self, *, cls: griffe.Class, **kwargs) -> None:
    del kwargs
    new = cls.members.get("__new__")
    if not isinstance(new, griffe.Function) or "__init__" in cls.members:
      return
    parameters = griffe.Parameters(
        *[p for p in new.parameters if p.name != "cls"])
    init = griffe.Function("__init__", lineno=new.lineno,
                           endlineno=new.endlineno, parameters=parameters,
                           returns=None)
    cls.set_member("__init__", init)
