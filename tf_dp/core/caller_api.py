"""The constructor a user built the DP step with, as its refusals name it.

A refusal names the argument to set and the call to set it in. A user of
``tf_dp.DPOptimizer`` reads ``DPOptimizer(..., population_size=
len(x_train))``; a user of a wrapper that keeps another library's names
(``tf_dp.compat.tensorflow_privacy``'s ``DPKerasSGDOptimizer``,
``DPGradientDescentGaussianOptimizer``, ``DPSequential``) reads that
wrapper's constructor and argument names. The ``DPConfig`` of a step keeps
its ``CallerApi``; the front ends build their messages with it.
"""

import dataclasses
from typing import FrozenSet, Tuple


@dataclasses.dataclass(frozen=True)
class CallerApi:
  """The constructor of a DP step and its names for tf_dp's arguments.

  Attributes:
    constructor: What the user called: ``"DPOptimizer"``, or a wrapper's
      name such as TF Privacy's ``"DPKerasSGDOptimizer"``.
    renamed: ``(tf_dp's argument, the constructor's name for it)`` pairs
      (TF Privacy's ``dp_sum_query`` for ``dp_query``).
    added: tf_dp arguments the constructor takes beyond its library's own
      signature (``population_size`` for TF Privacy's names).
    added_note: Said after naming one of ``added``.
    not_taken: tf_dp arguments the constructor does not take.
    not_taken_call: Where one of ``not_taken`` is set instead: a format
      string of ``{setting}`` (``argument=value``).
    unconverted_model_fix: How a model this constructor's optimizer was
      compiled into gets converted with ``make_private`` (said when the
      optimizer receives summed gradients); empty for tf_dp's own
      ``make_private`` advice only.
  """
  constructor: str = "DPOptimizer"
  renamed: Tuple[Tuple[str, str], ...] = ()
  added: FrozenSet[str] = frozenset()
  added_note: str = ""
  not_taken: FrozenSet[str] = frozenset()
  not_taken_call: str = "tf_dp.DPOptimizer(..., {setting})"
  unconverted_model_fix: str = ""

  def argument(self, name: str) -> str:
    """The constructor's name for tf_dp's argument ``name``."""
    return dict(self.renamed).get(name, name)

  def setting(self, name: str, value: str) -> str:
    """The call that sets tf_dp's argument ``name`` to ``value`` (source
    text), e.g. ``DPKerasSGDOptimizer(..., population_size=60000)``."""
    if name in self.not_taken:
      return (self.not_taken_call.format(setting=f"{name}={value}")
              + f" ({self.constructor} does not take {name})")
    text = f"{self.constructor}(..., {self.argument(name)}={value})"
    if name in self.added and self.added_note:
      text += f" ({name} is {self.added_note})"
    return text


# The default: tf_dp's own DPOptimizer.
TF_DP = CallerApi()
