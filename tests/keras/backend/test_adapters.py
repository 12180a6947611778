"""Each flavour's adapter (``keras3.py``, ``keras2.py``) on its own Keras."""

import numpy as np
import pytest
import tensorflow as tf

from tf_dp.keras import backend
from tf_dp.keras.backend import callback
from tests.keras import helpers

KERAS = helpers.keras_modules()


def _adapter(K):
  return backend.keras3 if K is backend.keras3_module() else backend.keras2


@pytest.mark.parametrize("K", KERAS)
def test_all_layers_recurses_and_sublayers_go_one_level_down(K):
  inner = K.Sequential([K.layers.Input((4,)), K.layers.Dense(3, name="d1"),
                        K.layers.Dense(3, name="d2")], name="inner")
  inputs = K.layers.Input((4,))
  attention = K.layers.MultiHeadAttention(2, 2, name="mha")
  seq = K.layers.Reshape((1, 3))(inner(inputs))
  outputs = K.layers.Dense(1, name="out")(attention(seq, seq))
  model = K.Model(inputs, outputs)
  adapter = _adapter(K)
  names = [layer.name for layer in adapter.all_layers(model)]
  assert {"inner", "d1", "d2", "mha", "out"} <= set(names)
  assert model.name not in names
  assert {"d1", "d2"} <= {layer.name for layer in adapter.sublayers(inner)}
  dense_parts = [layer for layer in adapter.sublayers(attention)
                 if type(layer).__name__ == "EinsumDense"]
  assert len(dense_parts) == 4  # query, key, value, output


@pytest.mark.parametrize("K", KERAS)
def test_batch_norm_classes_catch_subclasses_of_any_name(K):
  class Renamed(K.layers.BatchNormalization):
    pass

  classes = _adapter(K).batch_norm_classes()
  assert isinstance(Renamed(), classes)
  assert not isinstance(K.layers.LayerNormalization(), classes)


@pytest.mark.parametrize("K", KERAS)
def test_pfor_hazards_are_keras_3_einsum_layers_only(K):
  classes = set(_adapter(K).pfor_hazard_layer_classes())
  if _adapter(K) is backend.keras3:
    assert classes == {K.layers.EinsumDense, K.layers.MultiHeadAttention}
  else:
    assert not classes


def _masks_per_example(layer, n=6, width=64):
  """The dropout masks ``layer`` draws for ``n`` examples under
  ``tf.vectorized_map`` (one example per iteration, as the DP step)."""
  ones = tf.ones([n, 1, width])
  out = tf.vectorized_map(lambda x: layer(x, training=True), ones)
  return np.asarray(out).reshape(n, width) != 0


@pytest.mark.parametrize("K", KERAS)
def test_dropout_draws_a_mask_per_example_after_preparation(K):
  adapter = _adapter(K)
  layer = K.layers.Dropout(0.5)
  adapter.make_randomness_per_example(layer)
  masks = _masks_per_example(layer)
  assert len({m.tobytes() for m in masks}) == len(masks)
  patched = "call" in layer.__dict__
  assert patched == (adapter is backend.keras3)


@pytest.mark.parametrize("K", KERAS)
def test_randomness_refusals_and_lookalikes(K):
  adapter = _adapter(K)

  class Dropout(K.layers.Layer):  # Named like Keras's, not Keras's.

    def __init__(self, rate):
      super().__init__()
      self.rate = rate

  lookalike = Dropout(0.5)
  adapter.make_randomness_per_example(lookalike)
  assert "call" not in lookalike.__dict__
  rnn = K.layers.GRU(3, dropout=0.2)
  if adapter is backend.keras3:
    with pytest.raises(ValueError, match="recurrent_dropout=0"):
      adapter.make_randomness_per_example(rnn)
  else:
    adapter.make_randomness_per_example(rnn)  # Stateful ops: nothing to do.


def _compiled(K, **compile_kwargs):
  model = helpers.build_model(K, "dense")
  model.compile(optimizer=K.optimizers.SGD(0.1), **compile_kwargs)
  return model


@pytest.mark.parametrize("K", KERAS)
def test_loss_container_gives_keras_loss_of_a_batch(K):
  adapter = _adapter(K)
  assert adapter.loss_container(helpers.build_model(K, "dense")) is None
  model = _compiled(K, loss=K.losses.SparseCategoricalCrossentropy(
      from_logits=True), loss_weights=[2.0])
  x, y = helpers.make_data("dense", 5)
  y_pred = model(x)
  weights = tf.constant([1.0, 0.5, 2.0, 0.0, 1.0])
  container = adapter.loss_container(model)
  adapter.build_loss_container(container, tf.constant(y), y_pred)
  value = adapter.batch_of_one_loss(container)(tf.constant(y), y_pred,
                                               weights)
  per_example = K.losses.SparseCategoricalCrossentropy(
      from_logits=True, reduction="none")(y, y_pred)
  expected = 2.0 * np.sum(np.asarray(per_example) * weights.numpy()) / 5
  assert float(value) == pytest.approx(expected, rel=1e-5)
  assert adapter.get_loss("mse") is not None
  assert isinstance(adapter.get_optimizer("sgd"), K.optimizers.Optimizer)


@pytest.mark.parametrize("K", KERAS)
def test_output_mask_round_trip(K):
  adapter = _adapter(K)
  t = tf.zeros([2, 3])
  assert adapter.output_mask(t) is None
  mask = tf.constant([[True, False, True]] * 2)
  adapter.set_output_mask(t, mask)
  assert adapter.output_mask(t) is mask


@pytest.mark.parametrize("K", KERAS)
def test_added_loss_terms_and_weight_regularisers(K):
  adapter = _adapter(K)

  class AddsLoss(K.layers.Layer):

    def call(self, inputs):
      self.add_loss(tf.constant(3.0))
      return inputs

  reg = K.regularizers.L2(0.5)
  dense = K.layers.Dense(2, kernel_regularizer=reg)
  adds = AddsLoss()
  model = K.Sequential([K.layers.Input((3,)), adds, dense])
  # Traced, as model_checks.adds_losses traces a call of the model.
  tf.function(lambda t: model(t, training=True)).get_concrete_function(
      tf.TensorSpec([1, 3]))
  assert len(adapter.added_loss_terms(adds)) == 1
  assert adapter.added_loss_terms(dense) == []
  plain = K.Sequential([K.layers.Input((3,)), dense])
  terms = adapter.weight_regularization_terms(plain)
  assert float(tf.add_n(terms)) == pytest.approx(float(reg(dense.kernel)))


@pytest.mark.parametrize("K", KERAS)
def test_unpack_and_reported_loss(K):
  adapter = _adapter(K)
  x, y = helpers.make_data("dense", 4)
  assert adapter.unpack_x_y_sample_weight((x, y))[2] is None
  model = _compiled(K, loss="sparse_categorical_crossentropy")
  y_pred = model(x)
  loss = adapter.reported_loss(model, tf.constant(x), tf.constant(y), y_pred,
                               None, None)
  assert float(loss) == pytest.approx(float(np.mean(
      K.losses.sparse_categorical_crossentropy(y, y_pred))), rel=1e-5)


def test_callback_hooks_follow_train_batch_hooks():
  class Quiet(callback.Callback):
    pass

  class Busy(callback.Callback):
    train_batch_hooks = True

  for cb, expected in ((Quiet(), False), (Busy(), True)):
    assert cb._implements_train_batch_hooks() is expected  # pylint: disable=protected-access
    assert cb._implements_test_batch_hooks() is False  # pylint: disable=protected-access
    assert cb.on_epoch_end(0, {}) is None  # Default no-op hooks.
  with pytest.raises(AttributeError):
    Quiet().not_a_hook  # pylint: disable=expression-not-assigned


@pytest.mark.parametrize("K", KERAS)
def test_the_wrapping_optimizer_applies_with_the_inner_one(K):
  """The Keras side of the DP optimizer (``keras3_bases``, ``keras2_bases``):
  the wrapped optimizer applies the gradients and owns the step counter."""
  if _adapter(K) is backend.keras3:
    from tf_dp.keras.backend import keras3_bases as bases  # pylint: disable=g-import-not-at-top
  else:
    from tf_dp.keras.backend import keras2_bases as bases  # pylint: disable=g-import-not-at-top
  inner = K.optimizers.SGD(0.5)
  wrapper = bases.WrappingOptimizer(inner, "wrapper")
  variable = tf.Variable([1.0, 2.0])
  wrapper.build([variable])
  wrapper.apply_with_inner([tf.constant([2.0, -2.0])], [variable])
  np.testing.assert_allclose(variable.numpy(), [0.0, 3.0])
  assert int(wrapper.iterations.numpy()) == 1
  assert wrapper.iterations is inner.iterations
  assert bases.optimizer_name(inner) == inner.name
  restored = bases.WrappingOptimizer.inner_from_config(wrapper.inner_config())
  assert type(restored) is type(inner)
