"""Tests of tf_dp.keras.optimizer: ``DPOptimizer`` builds the DP optimizer
of the wrapped optimizer's Keras flavour, validates its arguments by name,
round-trips its config, and is the ``isinstance`` type of every flavour's
DP optimizer."""

import numpy as np
import pytest
import tensorflow as tf

import tf_dp
from tests.keras import helpers

KERAS = helpers.keras_modules()


weights = helpers.float64_weights


@pytest.mark.parametrize("kwargs,match", [
    (dict(l2_norm_clip=-1.0, noise_multiplier=1.0, population_size=10),
     "l2_norm_clip"),
    (dict(l2_norm_clip=1.0, noise_multiplier=-1.0, population_size=10),
     "noise_multiplier"),
    (dict(l2_norm_clip=1.0, noise_multiplier=1.0, population_size=0),
     "population_size"),
    (dict(l2_norm_clip=1.0, noise_multiplier=1.0, sampling="fixed_size"),
     "population_size is required"),
    (dict(l2_norm_clip=1.0, noise_multiplier=1.0, population_size=10,
          num_microbatches=0), "num_microbatches"),
    (dict(l2_norm_clip=1.0, noise_multiplier=1.0, population_size=10,
          gradient_accumulation_steps=0), "gradient_accumulation_steps"),
    (dict(l2_norm_clip=1.0, noise_multiplier=1.0, population_size=10,
          sampling="poisson"), "sampling_probability"),
])
def test_invalid_optimizer_arguments(kwargs, match):
  K = helpers.keras_modules()[0].values[0]
  with pytest.raises(ValueError, match=match):
    tf_dp.DPOptimizer(K.optimizers.SGD(0.1), **kwargs)


@pytest.mark.parametrize("argument", ["l2_norm_clip", "noise_multiplier"])
@pytest.mark.parametrize("make", [tf.constant, tf.Variable],
                         ids=["tensor", "variable"])
def test_a_tensorflow_value_is_refused_with_the_fix(argument, make):
  # The ledger and the accountants read these as numbers fixed when they
  # are given: a tensor or variable (which a user might later assign,
  # expecting the clip to follow) is refused, and the message says what
  # to pass instead.
  K = helpers.keras_modules()[0].values[0]
  kwargs = dict(l2_norm_clip=1.0, noise_multiplier=1.0, population_size=10)
  kwargs[argument] = make(1.0)
  with pytest.raises(ValueError, match=(
      f"{argument} must be .* pass a Python number .*"
      "QuantileAdaptiveClipSumQuery")):
    tf_dp.DPOptimizer(K.optimizers.SGD(0.1), **kwargs)


def test_dp_query_of_the_wrong_type_is_refused():
  K = helpers.keras_modules()[0].values[0]
  with pytest.raises(TypeError, match="dp_query must be a tf_dp DPQuery"):
    tf_dp.DPOptimizer(K.optimizers.SGD(0.1), dp_query="gaussian",
                      population_size=10)


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("opt", ["Adam", "Adagrad", "RMSprop"])
def test_wraps_any_optimizer(K, opt):
  x, y = helpers.make_data("dense", 16)
  model = tf_dp.keras.make_private(helpers.build_model(K, "dense"))
  model.compile(optimizer=tf_dp.DPOptimizer(getattr(K.optimizers, opt)(0.01),
                                            1.0, 1.0, population_size=16),
                loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  before = weights(model)
  model.fit(x, y, batch_size=8, epochs=1, verbose=0)
  assert not np.allclose(before[0], weights(model)[0])
  assert int(model.optimizer.iterations.numpy()) == 2


@pytest.mark.parametrize("K", KERAS)
def test_config_round_trip(K):
  opt = tf_dp.DPOptimizer(K.optimizers.Adam(0.01), 1.5, 0.9,
                          population_size=100, num_microbatches=2)
  clone = type(opt).from_config(opt.get_config())
  assert clone.dp_config == opt.dp_config
  assert type(clone.inner_optimizer) is type(opt.inner_optimizer)


@pytest.mark.parametrize("K", KERAS)
def test_isinstance_of_dp_optimizer_holds_for_every_flavour(K):
  optimizer = tf_dp.DPOptimizer(K.optimizers.SGD(0.1), 1.0, 1.0,
                                population_size=10)
  assert isinstance(optimizer, tf_dp.DPOptimizer)
  assert isinstance(optimizer, K.optimizers.Optimizer)
  assert issubclass(type(optimizer), tf_dp.DPOptimizer)
  assert not isinstance(K.optimizers.SGD(0.1), tf_dp.DPOptimizer)
  assert not isinstance(object(), tf_dp.DPOptimizer)
