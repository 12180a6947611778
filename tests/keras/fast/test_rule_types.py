"""What a rule is (``tf_dp/keras/fast/rule_types.py``): the protocols the
built-in rules satisfy, the optional parts' defaults, and the registry."""

import pytest

from tf_dp.keras.fast import rule_types
from tf_dp.keras.fast import rules
from tests.keras.fast.one_step import KERAS


class _Minimal:
  """A rule with the required members only."""
  pre_activation = False

  def supports(self, layer):
    return True

  def variables(self, layer):
    return []

  def prepare(self, layer, tap, out_grad, records):
    return rule_types.PerRecordGradients([])

  def sq_norms(self, state):
    return []

  def clipped_sums(self, state, scales, keep):
    return []


def test_optional_parts_default_to_float32_taps_and_one_call():
  rule = _Minimal()
  assert isinstance(rule, rule_types.Rule)
  assert rule_types.takes_float32_taps(rule)
  assert not rule_types.takes_several_calls(rule)
  dense = rules.DenseRule()
  assert rule_types.takes_several_calls(dense)
  assert rule_types.takes_float32_taps(dense)
  fallback = rules.LocalVectorizedRule(lambda x: x)
  assert not rule_types.takes_float32_taps(fallback)
  assert not isinstance(object(), rule_types.Rule)


@pytest.mark.parametrize("K", KERAS)
def test_every_built_in_rule_is_a_rule(K):
  layers = [K.layers.Dense(2), K.layers.Embedding(4, 2),
            K.layers.Conv2D(2, 3), K.layers.LayerNormalization(),
            K.layers.EinsumDense("ab,bc->ac", output_shape=2)]
  for layer in layers:
    rule = rules.rule_for(layer)
    assert isinstance(rule, rule_types.Rule), type(layer).__name__


def test_the_registry_keys_rules_by_class():
  registry = rule_types.RuleRegistry()

  class Layer:
    pass

  class Other:
    pass

  rule = _Minimal()
  registry.add(Layer, rule)
  assert Layer in registry and registry.get(Layer) is rule
  assert registry.get(Other) is None

  @registry.rule_class(Layer, Other)
  class Decorated(_Minimal):
    pass

  assert isinstance(registry.get(Layer), Decorated)
  assert registry.get(Layer) is registry.get(Other)
  registry.remove(Other)
  assert Other not in registry
  registry.add_composite(Other)
  assert registry.is_composite(Other) and not registry.is_composite(Layer)
  with pytest.raises(TypeError, match="keyed by class"):
    registry.add("Layer", rule)
  with pytest.raises(TypeError, match="expects a class"):
    registry.add_composite("Layer")
