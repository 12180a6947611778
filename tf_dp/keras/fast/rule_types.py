"""What a per-layer rule is (the ``Rule`` protocol and its optional parts)
and the registry that keys rules by layer class.

A rule computes, for one layer, each record's squared gradient norm per
variable and the clipped sum of the records' gradients, from the layer's
taps (``taps.Tap``) and output gradients. Its state (what ``prepare``
returns) is its own: the fast path only hands it back to ``sq_norms`` and
``clipped_sums``.
"""

import dataclasses
from typing import (Any, Callable, Dict, List, Optional, Protocol, Sequence,
                    Set, Type, TypeGuard, TypeVar, runtime_checkable)

import tensorflow as tf

from tf_dp.keras.fast import linear
from tf_dp.keras.fast import taps as taps_lib

Records = linear.Records
State = TypeVar("State")


@runtime_checkable
class Rule(Protocol[State]):
  """A rule for one layer class.

  Attributes:
    pre_activation: Whether the tap records the layer's output before its
      activation (Dense, convolutions, ...): the rule then reads the
      gradient with respect to that pre-activation output.
  """

  pre_activation: bool

  def supports(self, layer: Any) -> bool:
    """Whether the rule handles this layer's configuration (else the
    layer takes the per-layer fallback)."""

  def variables(self, layer: Any) -> List[Any]:
    """The variables the rule accounts for: exactly the layer's trainable
    variables."""

  def prepare(self, layer: Any, tap: taps_lib.Tap, out_grad: Any,
              records: Records) -> State:
    """The state of one call: per-record tensors from the tap and the
    output gradient (floating tensors in float32 unless the rule is a
    ``TapDtypeRule`` with ``float32_taps`` false)."""

  def sq_norms(self, state: State) -> List[tf.Tensor]:
    """``[R]`` float32 squared norms, one per variable of ``variables``:
    upper bounds on what ``clipped_sums`` adds per record."""

  def clipped_sums(self, state: State, scales: List[tf.Tensor],
                   keep: tf.Tensor) -> List[tf.Tensor]:
    """``sum_r scales_v[r] * grad_v[r]`` per variable; records whose
    ``keep`` is false are masked out (NaN or inf in them cannot leak)."""


@runtime_checkable
class MultiCallRule(Rule[State], Protocol[State]):
  """A rule that also handles a layer called several times in one forward
  pass (a shared layer, tied embeddings): a record's gradient is the sum
  over the calls. A layer whose rule is not one is refused by the fast
  path when it is called more than once."""

  def prepare_calls(self, layer: Any, taps: Sequence[taps_lib.Tap],
                    out_grads: Sequence[Any], records: Records) -> State:
    """The state of all of the layer's calls in one forward pass."""


@runtime_checkable
class TapDtypeRule(Protocol):
  """A rule that says whether its taps and output gradients are cast to
  float32 before ``prepare`` (a rule that is not one gets float32)."""

  float32_taps: bool


# What the built-in rules' modules register with: ``RuleRegistry.add``.
Register = Callable[[type, Rule[Any]], None]


def takes_several_calls(rule: Rule[Any]) -> TypeGuard[MultiCallRule[Any]]:
  """Whether ``rule`` handles a layer called several times."""
  return isinstance(rule, MultiCallRule)


def takes_float32_taps(rule: Rule[Any]) -> bool:
  """Whether ``rule``'s taps and output gradients arrive in float32 (the
  default; norms and sums are float32 either way)."""
  return rule.float32_taps if isinstance(rule, TapDtypeRule) else True


@dataclasses.dataclass(frozen=True)
class PerRecordGradients:
  """A state made of each record's gradient per variable
  (``[R, *variable.shape]`` each, float32)."""
  per_record: List[tf.Tensor]


_RuleClass = TypeVar("_RuleClass", bound=Type[Any])


class RuleRegistry:
  """Rules keyed by layer class: a rule covers layers of exactly its class
  (``rules.ruled_class`` decides when a subclass inherits it), and classes
  registered as composites are tapped through their sublayers."""

  def __init__(self) -> None:
    self._rules: Dict[type, Rule[Any]] = {}
    self._composites: Set[type] = set()

  def add(self, layer_class: type, rule: Rule[Any]) -> None:
    """Registers ``rule`` for ``layer_class`` (replacing any other)."""
    if not isinstance(layer_class, type):
      raise TypeError("register_rule expects a layer class, got "
                      f"{layer_class!r}: rules are keyed by class, not by "
                      "name.")
    self._rules[layer_class] = rule

  def remove(self, layer_class: type) -> None:
    """Forgets the rule of ``layer_class``."""
    del self._rules[layer_class]

  def get(self, layer_class: type) -> Optional[Rule[Any]]:
    """The rule registered for exactly ``layer_class``, or None."""
    return self._rules.get(layer_class)

  def __contains__(self, layer_class: type) -> bool:
    return layer_class in self._rules

  def rule_class(self, *layer_classes: type
                 ) -> Callable[[_RuleClass], _RuleClass]:
    """A class decorator: registers an instance of the decorated rule class
    (built without arguments) for each of ``layer_classes``."""
    def register(rule_class: _RuleClass) -> _RuleClass:
      rule = rule_class()
      for layer_class in layer_classes:
        self.add(layer_class, rule)
      return rule_class
    return register

  def add_composite(self, layer_class: type) -> None:
    """Taps the sublayers of layers of exactly ``layer_class``."""
    if not isinstance(layer_class, type):
      raise TypeError(f"register_composite expects a class, got "
                      f"{layer_class!r}.")
    self._composites.add(layer_class)

  def is_composite(self, layer_class: type) -> bool:
    return layer_class in self._composites
