"""Tests of tf_dp.keras.dp_step: the DP step of a converted model (fit's
train step and DPOptimizer.private_step). Penalties (regularisers,
add_loss terms) are added outside the clipped sum, a data-dependent
penalty stops the step before any write, and inputs the step cannot take
are refused with the fix.

References: one DP-SGD step by a per-example loop
(``helpers.reference_update``) plus the penalty's gradient by hand.
"""

import numpy as np
import pytest
import tensorflow as tf

import tf_dp
from tests.keras import helpers
from tf_dp.keras import backend
from tf_dp.keras import dp_step
from tf_dp.keras import losses as losses_lib

KERAS = helpers.keras_modules()
METHODS = ["fast", "vectorized"]


compile_dp = helpers.compile_dp_sgd
weights = helpers.float64_weights


@pytest.mark.parametrize("K", KERAS)
def test_regularization_is_added_outside_the_clipped_sum(K):
  x, y = helpers.make_data("dense", 8)
  reg = 0.5
  init = K.initializers.GlorotUniform(seed=0)
  model = K.Sequential([K.layers.Input((6,)),
                        K.layers.Dense(3, kernel_initializer=init,
                                       kernel_regularizer=K.regularizers.L2(
                                           reg))])
  ref = K.Sequential([K.layers.Input((6,)),
                      K.layers.Dense(3, kernel_initializer=init)])
  expected = helpers.reference_update(ref, x, y, clip=0.01, lr=1.0)
  kernel0 = model.trainable_variables[0].numpy()
  expected[0] -= 2 * reg * kernel0  # d/dW of reg * ||W||^2, unclipped.
  with pytest.warns(UserWarning):
    model = compile_dp(K, model, 8, clip=0.01, noise=0.0)
  model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
  for a, b in zip(expected, weights(model)):
    np.testing.assert_allclose(b, a, atol=1e-6)


def _penalised_model(K, data_dependent):
  """Dense(3) after a layer whose add_loss depends on its scale vector s
  (0.1 ||s||^2) or on its input (mean of squares), with s = 1 initially."""

  class Penalised(K.layers.Layer):

    def build(self, input_shape):
      self.s = self.add_weight(name="s", shape=(input_shape[-1],),
                               initializer="ones")

    def call(self, inputs):
      self.add_loss(tf.reduce_mean(tf.square(inputs)) if data_dependent
                    else 0.1 * tf.reduce_sum(tf.square(self.s)))
      return inputs * self.s

  init = K.initializers.GlorotUniform(seed=0)
  return K.Sequential([K.layers.Input((6,)), Penalised(),
                       K.layers.Dense(3, kernel_initializer=init)])


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("K", KERAS)
def test_add_loss_on_weights_is_added_outside_the_clipped_sum(K, method):
  x, y = helpers.make_data("dense", 8)
  model = _penalised_model(K, data_dependent=False)
  # s = 1 makes the model the plain Dense layer; the per-example loop
  # gives the clipped step of (s, kernel, bias).
  expected = helpers.reference_update(model, x, y, clip=0.01, lr=1.0)
  expected[0] -= 2 * 0.1 * np.ones(6)  # d/ds of 0.1 ||s||^2, unclipped.
  model = compile_dp(K, model, 8, clip=0.01, noise=0.0,
                     per_example_method=method)
  history = model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
  for a, b in zip(expected, weights(model)):
    np.testing.assert_allclose(b, a, atol=1e-6)
  assert np.isfinite(history.history["loss"][0])


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("K", KERAS)
def test_a_weight_the_loss_never_reads_moves_by_its_penalty_alone(K, method):
  """Keras's gradient of loss + penalties for a weight the loss never reads
  is the penalty's: the step applies that (a weight ``u = 1`` under L2(0.25)
  becomes ``1 - 2 * 0.25 = 0.5``, up to float32 rounding) and no noise to
  it (noise 1 here: a noised zero gradient would move it by ~1)."""

  class Unread(K.layers.Layer):

    def build(self, input_shape):
      self.u = self.add_weight(name="u", shape=(3,), initializer="ones",
                               regularizer=K.regularizers.L2(0.25))

    def call(self, inputs):
      return inputs

  x, y = helpers.make_data("dense", 8)
  unread = Unread()
  init = K.initializers.GlorotUniform(seed=0)
  model = K.Sequential([K.layers.Input((6,)), unread,
                        K.layers.Dense(3, kernel_initializer=init)])
  model = compile_dp(K, model, 8, clip=1.0, noise=1.0,
                     per_example_method=method)
  model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
  np.testing.assert_allclose(unread.u.numpy(), [0.5] * 3, rtol=1e-6)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("K", KERAS)
def test_data_dependent_add_loss_is_refused_before_any_update(K, method):
  x, y = helpers.make_data("dense", 8)
  model = compile_dp(K, _penalised_model(K, data_dependent=True), 8,
                     clip=0.01, noise=0.0, per_example_method=method)
  before = weights(model)
  with pytest.raises(Exception, match="add_loss.*depends on the input data"):
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
  for a, b in zip(before, weights(model)):
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("K", KERAS)
def test_an_add_loss_reading_integer_ids_fails_every_check(K):
  """The public input the check compares with zeros differs from zeros in
  every integer entry: a loss that reads one id per example fails every
  run of the check, not only the runs whose random ids are not all 0 (for
  ids drawn in {0, 1}, 1/2 of them; all 20 failing: 2^-20)."""
  from tf_dp.keras import model_checks  # pylint: disable=g-import-not-at-top

  class ReadsIds(K.layers.Layer):

    def call(self, ids):
      self.add_loss(tf.reduce_mean(tf.cast(ids, tf.float32)))
      return ids

  model = K.Sequential([K.layers.Input((1,), dtype="int32"), ReadsIds(),
                        K.layers.Embedding(4, 2), K.layers.Flatten(),
                        K.layers.Dense(1)])
  ids = tf.constant([[3], [1], [2], [0]], tf.int32)
  failed = 0
  for _ in range(20):
    try:
      model_checks.public_penalty(model, ids)
    except tf.errors.InvalidArgumentError as e:
      assert "depends on the input data" in e.message
      failed += 1
  assert failed == 20


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("K", KERAS)
def test_every_update_of_the_step_waits_for_the_add_loss_check(K, method):
  """The check above must fail before anything is written, whatever the
  scheduling: every op of the traced step that writes a variable (the
  update, the lot, the ledger, possibly inside a cond) has the check among
  its ancestors. Here no variable has a gradient of the penalty, so only
  an explicit dependency orders them."""
  x, y = helpers.make_data("dense", 8)
  model = compile_dp(K, _penalised_model(K, data_dependent=True), 8,
                     clip=0.01, noise=0.0, per_example_method=method)
  loss_fn = losses_lib.per_example_loss_fn(model)
  graph = tf.function(lambda x, y: dp_step.private_step(
      model, model.optimizer, loss_fn, x, y, None)[1]).get_concrete_function(
          tf.constant(x), tf.constant(y)).graph
  ops = graph.get_operations()
  checks = [op for op in ops if op.type in ("If", "StatelessIf")
            and "assert_near" in op.name]
  assert len(checks) == 1

  def ancestors(op, seen):
    for parent in [t.op for t in op.inputs] + list(op.control_inputs):
      if parent not in seen:
        seen.add(parent)
        ancestors(parent, seen)
    return seen

  before_check = ancestors(checks[0], set())
  writes = [op for op in ops if op not in before_check and op is not checks[0]
            and (op.type.startswith(("Assign", "ResourceApply"))
                 or op.type in ("If", "StatelessIf", "While"))]
  assert writes
  for op in writes:
    assert checks[0] in ancestors(op, set()), op.name


@pytest.mark.parametrize("K", KERAS)
def test_ragged_labels_are_refused_with_the_fix_before_any_update(K):
  x, y = helpers.make_data("dense", 4)
  model = compile_dp(K, helpers.build_model(K, "dense"), 4, clip=1.0,
                     noise=1.0)
  loss_fn = losses_lib.per_example_loss_fn(model)
  before = weights(model)
  ragged = tf.ragged.constant([[0], [1, 2], [2], [0]])
  with pytest.raises(ValueError, match="RaggedTensor labels.*to_tensor"):
    dp_step.private_step(model, model.optimizer, loss_fn, tf.constant(x),
                         ragged, None)
  sparse_w = tf.sparse.from_dense(tf.ones([4, 1]))
  with pytest.raises(ValueError, match="SparseTensor labels or sample"):
    dp_step.private_step(model, model.optimizer, loss_fn, tf.constant(x),
                         tf.constant(y), sparse_w)
  for a, b in zip(before, weights(model)):
    np.testing.assert_array_equal(a, b)
  assert not model.optimizer.ledger.to_dict()["samples"]


@pytest.mark.parametrize("K", KERAS)
def test_custom_loop_with_an_unbuilt_model_names_the_fix(K):
  x, y = helpers.make_data("dense", 8)
  model = tf_dp.keras.make_private(K.Sequential([K.layers.Dense(3)]))
  optimizer = tf_dp.DPOptimizer(K.optimizers.SGD(0.1), 1.0, 1.0,
                                population_size=8)
  with pytest.raises(ValueError, match=r"not built.*model\(x\)"):
    optimizer.private_step(model, K.losses.SparseCategoricalCrossentropy(
        from_logits=True), x, y)


@pytest.mark.parametrize("K", KERAS)
def test_converted_backend_is_the_adapter_of_a_converted_model_only(K):
  model = helpers.build_model(K, "dense")
  assert dp_step.converted_backend(model) is None
  converted = tf_dp.keras.make_private(model)
  adapter = dp_step.converted_backend(converted)
  assert adapter is backend.for_object(model)
  assert isinstance(converted, adapter.module().Model)


@pytest.mark.parametrize("K", KERAS)
def test_a_custom_loop_step_that_builds_the_dp_state_is_traced_once(K):
  """The first private_step, in the user's tf.function, creates the DP
  state (lot, ledger, optimizer slots) eagerly and outside the function's
  variable capture: the function runs the one trace it made, and each call
  records one lot."""
  x, y = helpers.make_data("dense", 8)
  model = tf_dp.keras.make_private(helpers.build_model(K, "dense"))
  optimizer = tf_dp.DPOptimizer(K.optimizers.SGD(0.1), 1.0, 1.0,
                                population_size=8)
  loss = K.losses.SparseCategoricalCrossentropy(from_logits=True)
  step = tf.function(lambda x, y: optimizer.private_step(model, loss, x, y))
  for _ in range(2):
    step(tf.constant(x), tf.constant(y))
  assert step.experimental_get_tracing_count() == 1
  assert len(optimizer.ledger.to_dict()["samples"]) == 2
