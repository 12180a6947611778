"""Audit of one DP-SGD step of the real Keras training path.

A linear model (no bias, weights 0) and a batch of examples with zero
inputs (zero gradients), with or without one canary example whose gradient,
clipped, points along the first weight (Poisson sampling with q = 1: the
record is present or absent, exactly the add/remove neighbours the
accountant assumes). Each trial resets the weights and runs one
``train_step`` of a ``make_private`` model compiled with ``DPOptimizer``; the
score is the update of the first weight. The claimed epsilon is read from
the ledger (one sample).
"""

import numpy as np
import tensorflow as tf

import tf_dp
from tf_dp.reproductions.audit import bounds
from tf_dp.sampling import Sampling


def audit_dp_sgd_step(keras, noise_multiplier, l2_norm_clip=1.0, batch=16,
                      dims=4, trials=2000, delta=1e-5, alpha=0.05,
                      dp_query=None):
  """``(claimed_epsilon, empirical_lower_bound)`` of one DP-SGD step."""
  n = batch + 1
  model = keras.Sequential([keras.layers.Input((dims,)),
                            keras.layers.Dense(1, use_bias=False,
                                               kernel_initializer="zeros")])
  model = tf_dp.keras.make_private(model)
  optimizer = tf_dp.DPOptimizer(
      keras.optimizers.SGD(1.0), l2_norm_clip=l2_norm_clip,
      noise_multiplier=noise_multiplier, population_size=n,
      sampling=Sampling.POISSON, sampling_probability=1.0, dp_query=dp_query,
      max_lots=2 * trials + 10)
  model.compile(optimizer=optimizer, loss="mse")
  x = np.zeros((n, dims), np.float32)
  x[0, 0] = 10.0  # the canary: gradient -2 * 10 * 10 e_1, norm 200 >> C.
  y = np.zeros((n, 1), np.float32)
  y[0] = 10.0
  x, y = tf.constant(x), tf.constant(y)
  step = tf.function(lambda w: model.train_step((x, y, w)))
  kernel = model.trainable_variables[0]
  zeros = np.zeros(kernel.shape, np.float32)
  scale = n / l2_norm_clip  # the canary moves w_1 by C / n.

  def scores(canary):
    weights = np.ones(n, np.float32)
    weights[0] = float(canary)
    out = np.empty(trials)
    for i in range(trials):
      kernel.assign(zeros)
      step(weights)
      out[i] = float(kernel.numpy()[0, 0]) * scale
    return out

  without, with_ = scores(False), scores(True)
  first = optimizer.ledger.to_dict()
  first["samples"] = first["samples"][:1]
  claimed, _ = tf_dp.analysis.compute_epsilon_from_ledger(first, delta)
  lower, _ = bounds.best_threshold_epsilon_lower_bound(without, with_, delta,
                                                       alpha)
  return claimed, lower


def audit_dp_sgd_fit(keras, noise_multiplier, l2_norm_clip=1.0, batch=8,
                     accumulation=2, dims=4, trials=500, delta=1e-5,
                     alpha=0.05):
  """``(claimed_epsilon, empirical_lower_bound)`` of one lot of ``fit``.

  As ``audit_dp_sgd_step``, through everything a user runs: ``make_private``,
  ``compile`` with a loss given by name (``"mse"``, labels of shape ``(B,)``
  against an output of shape ``(B, 1)``), ``model.fit`` on a dataset whose
  lot is ``accumulation`` batches (``gradient_accumulation_steps``), one
  lot per trial.
  """
  n = batch * accumulation
  model = keras.Sequential([keras.layers.Input((dims,)),
                            keras.layers.Dense(1, use_bias=False,
                                               kernel_initializer="zeros")])
  model = tf_dp.keras.make_private(model)
  optimizer = tf_dp.DPOptimizer(
      keras.optimizers.SGD(1.0), l2_norm_clip=l2_norm_clip,
      noise_multiplier=noise_multiplier, population_size=n,
      sampling=Sampling.POISSON, sampling_probability=1.0,
      gradient_accumulation_steps=accumulation, max_lots=2 * trials + 10)
  model.compile(optimizer=optimizer, loss="mse")
  x = np.zeros((n, dims), np.float32)
  x[0, 0] = 10.0  # the canary, in the lot's first batch.
  y = np.zeros((n,), np.float32)
  y[0] = 10.0
  kernel = model.trainable_variables[0]
  zeros = np.zeros(kernel.shape, np.float32)
  scale = n / l2_norm_clip

  def scores(canary):
    weights = np.ones(n, np.float32)
    weights[0] = float(canary)
    # With q = 1 every lot is all n examples: this dataset, one lot of
    # ``accumulation`` batches, is exactly such a Poisson lot.
    data = tf_dp.data.declare_sampling(
        tf.data.Dataset.from_tensor_slices((x, y, weights)).batch(batch),
        Sampling.POISSON, 1.0, population_size=n,
        batches_per_lot=accumulation)
    out = np.empty(trials)
    for i in range(trials):
      kernel.assign(zeros)
      model.fit(data, epochs=1, verbose=0, shuffle=False)
      out[i] = float(kernel.numpy()[0, 0]) * scale
    return out

  without, with_ = scores(False), scores(True)
  first = optimizer.ledger.to_dict(ledger_format="tf_dp.privacy_ledger/1")
  first["samples"] = first["samples"][:1]
  claimed, _ = tf_dp.analysis.compute_epsilon_from_ledger(first, delta)
  lower, _ = bounds.best_threshold_epsilon_lower_bound(without, with_, delta,
                                                       alpha)
  return claimed, lower
