"""Which layers get a fast rule (``tf_dp/keras/fast/rules.py``): the
built-in rules of both Keras flavours, the registry, subclasses that
inherit a rule only without new computation, and models whose every layer
has one (a transformer, a MobileNet-like network).

The loop comparisons are ``one_step._fast_step_matches_loop`` (tolerance
1e-5, stated there).
"""

import pytest
import tensorflow as tf

from tf_dp.keras.fast import linear
from tf_dp.keras.fast import rule_types
from tf_dp.keras.fast import rules
from tests.keras.fast.one_step import FALLBACK
from tests.keras.fast.one_step import KERAS
from tests.keras.fast.one_step import _data
from tests.keras.fast.one_step import _fast_step_matches_loop
from tests.keras.fast.one_step import _init
from tests.keras.fast.one_step import _sequential
from tests.keras.fast.one_step import _tokens


def _user_dense_class(K):
  class Dense(K.layers.Layer):  # pylint: disable=invalid-name
    """Named like keras.layers.Dense, but z = x kernel^3 (not linear)."""

    def __init__(self, units, **kwargs):
      super().__init__(**kwargs)
      self.units = units

    def build(self, input_shape):
      self.kernel = self.add_weight(
          name="kernel", shape=(int(input_shape[-1]), self.units),
          initializer=K.initializers.RandomUniform(-1.0, 1.0, seed=3))

    def call(self, inputs):
      return tf.matmul(inputs, self.kernel ** 3)
  return Dense


@pytest.mark.parametrize("K", KERAS)
def test_a_user_layer_named_dense_gets_no_dense_rule(K):
  layer = _user_dense_class(K)(4)
  model = _sequential(K, (5,), [layer])
  assert type(layer).__name__ == "Dense" and rules.rule_for(layer) is None
  x, y = _data((5,))
  plan = _fast_step_matches_loop(K, model, x, y)
  assert FALLBACK in plan[layer.name]


@pytest.mark.parametrize("K", KERAS)
def test_subclasses_inherit_rules_only_without_new_computation(K):
  class Renamed(K.layers.Dense):
    """Only construction and configuration: the parent's call."""

    def __init__(self, units, **kwargs):
      super().__init__(units, use_bias=False, **kwargs)

    def get_config(self):
      return super().get_config()

  class Cubed(Renamed):
    def call(self, inputs):
      return tf.matmul(inputs, self.kernel ** 3)

  class Rebuilt(K.layers.Dense):
    def build(self, input_shape):
      super().build(input_shape)

  assert isinstance(rules.rule_for(Renamed(3)), rules.DenseRule)
  assert rules.rule_for(Cubed(3)) is None  # Below a neutral class too.
  assert rules.rule_for(Rebuilt(3)) is None
  patched = K.layers.Dense(3)
  patched.call = lambda inputs: inputs
  assert rules.rule_for(patched) is None
  rules.register_rule(Cubed, rules.DenseRule())
  try:
    assert isinstance(rules.rule_for(Cubed(3)), rules.DenseRule)
  finally:
    rules._REGISTRY.remove(Cubed)  # pylint: disable=protected-access
  assert isinstance(rules.rule_for(K.layers.Dense(3)), rules.DenseRule)
  # The inherited rule computes the subclass's gradients.
  layer = Renamed(4, activation="tanh", kernel_initializer=_init(K, 1))
  x, y = _data((5,))
  plan = _fast_step_matches_loop(K, _sequential(K, (5,), [layer]), x, y)
  assert "DenseRule" in plan[layer.name]


def test_register_rule_refuses_names():
  with pytest.raises(TypeError, match="keyed by class"):
    rules.register_rule("Dense", rules.DenseRule())


@pytest.mark.parametrize("K", KERAS)
def test_registry_accepts_user_rules(K):
  from tf_dp.keras.fast import rules  # pylint: disable=g-import-not-at-top

  class MyDense(K.layers.Dense):
    pass

  rules.register_rule(MyDense, rules.DenseRule())
  assert isinstance(rules.rule_for(MyDense(2)), rules.DenseRule)


@pytest.mark.parametrize("K", KERAS)
def test_a_rule_registered_with_the_decorator_is_used(K):
  """A user layer with its own call (z = x kernel^3: no inherited rule)
  and a rule declared with ``@register_rule_class``: the fast path takes
  the rule, and the step matches the per-example loop."""
  cubed = _user_dense_class(K)

  @rules.register_rule_class(cubed)
  class CubedRule:
    """Each example's kernel gradient, 3 kernel^2 * x^T g, materialised."""
    pre_activation = False

    def supports(self, layer):
      del layer
      return True

    def variables(self, layer):
      return [layer.kernel]

    def prepare(self, layer, tap, out_grad, records):
      del records  # One example per record here.
      outer = tf.einsum("bi,bu->biu", tap.args[0], out_grad)
      return rule_types.PerRecordGradients(
          [3.0 * tf.convert_to_tensor(layer.kernel) ** 2 * outer])

    def sq_norms(self, state):
      return [linear.exact_sq_norms(p) for p in state.per_record]

    def clipped_sums(self, state, scales, keep):
      return [tf.tensordot(s, linear.mask(p, keep), axes=[[0], [0]])
              for p, s in zip(state.per_record, scales)]

  layer = cubed(4)
  assert isinstance(rules.rule_for(layer), CubedRule)
  x, y = _data((5,))
  plan = _fast_step_matches_loop(K, _sequential(K, (5,), [layer]), x, y)
  assert plan[layer.name] == "fast rule (CubedRule)"


def _transformer(K, seq=8, vocab=20, width=8):
  inputs = K.layers.Input((seq,), dtype="int32")
  h = K.layers.Embedding(vocab, width)(inputs)
  for _ in range(2):
    h = K.layers.LayerNormalization()(
        h + K.layers.MultiHeadAttention(2, width // 2)(h, h))
    h = K.layers.LayerNormalization()(
        h + K.layers.Dense(width, activation="relu")(h))
  h = K.layers.GlobalAveragePooling1D()(h)
  return K.Model(inputs, K.layers.Dense(3)(h))


def _mobilenet(K):
  layers = K.layers
  inputs = layers.Input((16, 16, 3))
  h = layers.Conv2D(8, 3, strides=2, padding="same", activation="relu")(inputs)
  h = layers.GroupNormalization(4)(h)
  for filters, stride in ((16, 1), (16, 2)):
    h = layers.DepthwiseConv2D(3, strides=stride, padding="same",
                               activation="relu")(h)
    h = layers.GroupNormalization(4)(h)
    h = layers.Conv2D(filters, 1, activation="relu")(h)
  h = layers.SeparableConv2D(16, 3, padding="same", activation="relu")(h)
  h = layers.Conv2D(16, 3, groups=4, padding="same", activation="relu")(h)
  h = layers.GlobalAveragePooling2D()(h)
  return K.Model(inputs, layers.Dense(3)(h))


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("kind", ["transformer", "mobilenet"])
def test_transformer_and_mobilenet_never_fall_back(K, kind):
  model = _transformer(K) if kind == "transformer" else _mobilenet(K)
  if kind == "transformer":
    x, y = _tokens(6, seq=8, vocab=20)
  else:
    x, y = _data((16, 16, 3))
  plan = _fast_step_matches_loop(K, model, x, y)
  assert not [n for n, p in plan.items() if FALLBACK in p], plan


BUILTIN = {"Dense": (2,), "EinsumDense": ("ab,bc->ac", 2), "Embedding": (3, 2),
           "Conv1D": (2, 2), "Conv2D": (2, 2), "Conv3D": (2, 2),
           "DepthwiseConv2D": (2,), "SeparableConv2D": (2, 2),
           "Conv2DTranspose": (2, 2), "LayerNormalization": (),
           "GroupNormalization": (1,)}


@pytest.mark.parametrize("K", KERAS)
def test_builtin_rules_cover_both_flavours(K):
  for name, args in BUILTIN.items():
    layer = getattr(K.layers, name)(*args)
    assert rules.rule_for(layer) is not None, name
