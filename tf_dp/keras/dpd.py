"""Differentially private dropout (DPD; Ermis & Cemgil 2017, Algorithm 1).

Each iteration takes a minibatch of S examples, computes the data term of
the gradient at full-data scale, ``g = (N/S) sum_i grad l_i``, clips it as a
whole to norm C, adds ``xi' ~ N(0, 4 C^2 sigma^2 I)`` and updates
``theta <- theta - (eta_t / 2)(g_clipped + xi')`` with ``eta_t = eta_0 / t``
(the paper writes the ascent form on the log-posterior). The noise plays the
role of Gaussian dropout with per-weight rate ``alpha = 4 C^2 sigma^2 /
theta^2`` (``tf_dp.analysis.dpd_dropout_rates``).

This is DP-SGD with one record per batch: clipping ``N * mean`` to C equals
``N`` times clipping the mean to ``C / N``. So ``make_dpd_optimizer`` returns
a ``DPOptimizer`` with ``num_microbatches=1``, ``l2_norm_clip = C / N``,
``noise_multiplier = 2 sigma`` and learning rate ``N eta_t / 2``. Its ledger
records what is done: fixed-size samples (replace-one neighbours: one
example changes the clipped batch gradient by at most 2C) and a sum query
with noise ``2 sigma`` times the clip, so the RDP accountant reports the
epsilon of the run actually performed.
"""

import math

from tf_dp.analysis import dpd as dpd_accounting
from tf_dp.keras import compat
from tf_dp.keras.optimizer import DPOptimizer


def make_dpd_optimizer(population_size, batch_size, epochs, l2_norm_clip,
                       learning_rate, noise_multiplier=None, epsilon=None,
                       delta=None, method="zcdp", as_published=False,
                       keras=None):
  """A DPD optimizer and a description of its privacy.

  Give ``noise_multiplier`` (sigma) or ``epsilon`` and ``delta`` (sigma is then
  calibrated with the paper's accounting ``method``, composed over the
  iterations performed unless ``as_published``).

  Returns:
    ``(optimizer, info)``; info has ``sigma``, ``iterations``,
    ``sampling_rate`` and ``claimed_epsilon`` (the paper's accounting; the
    proven epsilon is ``compute_epsilon_from_ledger(optimizer.ledger, ...)``).
  """
  keras = keras or compat.keras3() or compat.keras2()
  nu = batch_size / population_size
  # Keras runs ceil(N / S) batches per epoch (the last one short): account
  # for, and size the ledger by, the iterations actually performed.
  iterations = int(math.ceil(epochs)) * int(math.ceil(population_size
                                                      / batch_size))
  if noise_multiplier is None:
    if epsilon is None or delta is None:
      raise ValueError("Give noise_multiplier, or epsilon and delta.")
    noise_multiplier = dpd_accounting.dpd_noise_multiplier(
        epsilon, delta, nu, iterations, method, as_published)
  claimed = None
  if delta is not None:
    import warnings  # pylint: disable=g-import-not-at-top
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", UserWarning)
      claimed = dpd_accounting.dpd_epsilon(noise_multiplier, delta, nu,
                                           iterations, method, as_published)
  n = float(population_size)
  schedule = keras.optimizers.schedules.InverseTimeDecay(
      initial_learning_rate=n * learning_rate / 2, decay_steps=1,
      decay_rate=1.0)  # N eta_0 / (2 t), t = step + 1.
  optimizer = DPOptimizer(
      keras.optimizers.SGD(schedule), l2_norm_clip=l2_norm_clip / n,
      noise_multiplier=2 * noise_multiplier, num_microbatches=1,
      population_size=population_size, sampling="fixed_size",
      max_lots=iterations + 10)
  info = {"sigma": noise_multiplier, "iterations": iterations,
          "sampling_rate": nu, "claimed_epsilon": claimed, "method": method,
          "as_published": as_published}
  return optimizer, info
