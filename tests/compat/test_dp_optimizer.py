"""TF Privacy's compat.v1 DP optimizer names (``privacy.optimizers.
dp_optimizer``), as ``lm_dpsgd_tutorial.py`` uses them: a ``[batch, time]``
loss and ``unroll_microbatches=True``, in a ``tf.compat.v1`` Session (the
graph an Estimator builds; TF 2.21 keeps the v1 optimizers)."""

import warnings

import numpy as np
import pytest
import tensorflow as tf

from tf_dp.compat.tensorflow_privacy.privacy.dp_query import gaussian_query
from tf_dp.compat.tensorflow_privacy.privacy.dp_query import normalized_query
from tf_dp.compat.tensorflow_privacy.privacy.optimizers import dp_optimizer

v1 = tf.compat.v1
RNG = np.random.default_rng(2)
X = RNG.normal(size=(6, 4, 3)).astype(np.float32)
Y = RNG.normal(size=(6, 4)).astype(np.float32)
W0 = RNG.normal(size=3).astype(np.float32)
CLIP, LR = 0.5, 0.1


def _reference():
  """One DP-SGD step by a loop: each example's loss is its mean over time,
  its gradient clipped to CLIP; no noise."""
  total = np.zeros_like(W0)
  for xi, yi in zip(X, Y):
    g = np.mean([2 * (xt @ W0 - yt) * xt for xt, yt in zip(xi, yi)], axis=0)
    total += g * min(1.0, CLIP / np.linalg.norm(g))
  return W0 - LR * total / len(X)


def _step(make_optimizer):
  with tf.Graph().as_default():
    w = tf.Variable(W0)
    loss = tf.square(tf.einsum("btk,k->bt", tf.constant(X), w) - Y)
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", UserWarning)  # noise_multiplier=0.
      train = make_optimizer().minimize(loss, var_list=[w])
    with v1.Session() as sess:
      sess.run(v1.global_variables_initializer())
      sess.run(train)
      return sess.run(w)


def test_gaussian_optimizer_with_batch_by_time_loss_and_unrolling():
  got = _step(lambda: dp_optimizer.DPGradientDescentGaussianOptimizer(
      l2_norm_clip=CLIP, noise_multiplier=0.0, num_microbatches=6,
      learning_rate=LR, unroll_microbatches=True, population_size=600))
  np.testing.assert_allclose(got, _reference(), rtol=1e-5, atol=1e-6)


def test_query_optimizer_with_unrolling():
  got = _step(lambda: dp_optimizer.DPGradientDescentOptimizer(
      gaussian_query.GaussianSumQuery(CLIP, 0.0), None, True,
      learning_rate=LR, population_size=600))
  np.testing.assert_allclose(got, _reference(), rtol=1e-5, atol=1e-6)


def test_names_and_population_size():
  adam = dp_optimizer.DPAdamGaussianOptimizer
  assert adam.__name__ == "DPAdamGaussianOptimizer"
  assert dp_optimizer.DPRMSPropGaussianOptimizer(
      1.0, 1.1, learning_rate=0.1, population_size=10).dp_config
  with pytest.raises(ValueError, match="population_size"):
    adam(1.0, 1.1, 4, True, learning_rate=0.01)


def test_refusals_name_tf_privacy_constructors_and_arguments():
  """TF Privacy's names: population_size is asked of the constructor the
  user called, a query by its argument dp_sum_query; TF Privacy's eager
  use (a loss callable, an eager loss) is refused naming what to use."""
  with pytest.raises(ValueError) as refusal:
    dp_optimizer.DPGradientDescentGaussianOptimizer(
        l2_norm_clip=1.0, noise_multiplier=1.1, num_microbatches=4,
        learning_rate=0.1)
  assert ("DPGradientDescentGaussianOptimizer(..., population_size="
          "len(x_train))") in str(refusal.value)
  average = normalized_query.NormalizedQuery(
      gaussian_query.GaussianSumQuery(1.0, 1.1), denominator=8.0)
  with pytest.raises(ValueError, match="^dp_sum_query must return the "
                     "noised SUM"):
    dp_optimizer.DPAdamOptimizer(average, learning_rate=0.1,
                                 population_size=100)
  optimizer = dp_optimizer.DPGradientDescentGaussianOptimizer(
      1.0, 1.1, learning_rate=0.1, population_size=100)
  w = tf.Variable([1.0, 2.0])
  with pytest.raises(ValueError, match="DPGradientDescentGaussianOptimizer "
                     "computes each example's gradient with tf.gradients.*"
                     "a loss callable.*DPKerasSGDOptimizer"):
    optimizer.minimize(lambda: tf.square(w), var_list=[w])
  with pytest.raises(RuntimeError, match="a loss computed eagerly"):
    optimizer.minimize(tf.square(w), var_list=[w])
