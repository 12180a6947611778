"""Differentially private dropout (DPD; Ermis & Cemgil 2017, Algorithm 1).

A paper reproduction on tf_dp's Keras front end. Each iteration takes a
sample of the data, clips gradients to norm C, adds
``xi' ~ N(0, 4 C^2 sigma^2 I)`` and updates
``theta <- theta - (eta_t / 2)(g_clipped + xi')`` with ``eta_t = eta_0 / t``
(the paper writes the ascent form on the log-posterior). The noise plays the
role of Gaussian dropout with per-weight rate ``alpha = 4 C^2 sigma^2 /
theta^2`` (``dpd_accounting.dpd_dropout_rates``).

The paper can be read two ways, and both are built (``clipping_unit``: what
is clipped to C as one record):

* ``"per_example"`` (default; the text: "clips the L2 norm of each gradient",
  and "the L2 sensitivity of the gradient sum is 2C"): each example's
  gradient is clipped to C and ``g_clipped`` is their SUM. This is DP-SGD
  with ``noise_multiplier = 2 sigma`` and a learning rate ``S eta_t / 2`` on
  the mean over the (expected) sample size S.
* ``"batch"`` (Algorithm 1 line 6 literally): the data term at full-data
  scale, ``(N/S) sum_i grad l_i``, is clipped as a whole to C. Clipping
  ``N * mean`` to C is ``N`` times clipping the mean to ``C / N``: DP-SGD with
  one record per batch, ``l2_norm_clip = C / N``, noise multiplier
  ``2 sigma`` and learning rate ``N eta_t / 2``. It adds noise of norm
  ~2 C sigma sqrt(d) to a signal of norm <= C, and does not learn on the
  paper's benchmarks (``benchmarks/dpd_table1.py``); it is kept to show that.

Sampling: ``"poisson"`` (default; the paper's accounting assumes each example
is included independently with probability nu) trains on
``tf_dp.data.poisson_sampled_batches``; ``"fixed_size"`` on batches of
exactly S examples drawn by ``tf_dp.data.fixed_size_sampled_batches`` (a
guarantee); ``"shuffled"`` on Keras's own batches of the arrays,
``fit(x, y, batch_size=S, shuffle=True)``, accounted like fixed-size
samples by the conventional approximation (the accountant warns; see
``tf_dp.data``). ``fit`` on arrays refuses the first two. The ledger
records the sampling, so tf_dp's accountant reports the epsilon of the run:
under Poisson sampling (add/remove neighbours) the per-example sum has
sensitivity C and noise ``2 C sigma``; under fixed-size and shuffled
sampling (replace-one neighbours) sensitivity 2C.
"""

import math
import warnings

from tf_dp.analysis import calibration
from tf_dp.analysis import checks
from tf_dp.analysis import dp_sgd_privacy
from tf_dp.keras import backend
from tf_dp.keras.optimizer import DPOptimizer
from tf_dp.reproductions import dpd_accounting
from tf_dp.sampling import Sampling

CLIPPING_UNITS = ("per_example", "batch")
DECAYS = ("epoch", "step")
METHODS = ("rdp",) + dpd_accounting.METHODS


def dpd_iterations(population_size, batch_size, epochs, sampling):
  """Iterations T of a DPD run: ``round(E / nu)`` Poisson samples, or Keras's
  ``E * ceil(N / S)`` fixed-size batches (the last one of each pass short)."""
  if sampling == Sampling.POISSON:
    return max(1, int(round(epochs * population_size / batch_size)))
  return int(math.ceil(epochs)) * int(math.ceil(population_size / batch_size))


def dpd_learning_rate(keras, initial, steps_per_decay):
  """``initial / t`` with ``t = 1 + floor(step / steps_per_decay)`` (gamma = 1)."""
  return keras.optimizers.schedules.InverseTimeDecay(
      initial_learning_rate=initial, decay_steps=steps_per_decay,
      decay_rate=1.0, staircase=True)


def _accountant_run(population_size, batch_size, iterations, sampling):
  """The (epochs, sampling) arguments under which tf_dp.analysis accounts
  exactly ``iterations`` steps of this sampling: it composes
  ceil(epochs * N / S) steps, so a fractional number of epochs is passed.
  Shuffled batches are accounted as fixed-size samples, as the ledger's
  accountant does."""
  return (iterations * batch_size / population_size,
          Sampling(sampling).accounted_as)


def _rdp_sigma(epsilon, delta, population_size, batch_size, iterations,
               sampling):
  """sigma whose ledger noise multiplier 2 sigma gives epsilon by tf_dp's
  default accountant (PLD, as ``compute_epsilon_from_ledger``)."""
  epochs, accountant_sampling = _accountant_run(population_size, batch_size,
                                                iterations, sampling)
  z = calibration.compute_noise_multiplier(
      population_size, batch_size, epsilon, epochs, delta,
      sampling=accountant_sampling)
  return z / 2


def _rdp_epsilon(sigma, delta, population_size, batch_size, iterations,
                 sampling):
  epochs, accountant_sampling = _accountant_run(population_size, batch_size,
                                                iterations, sampling)
  eps, _ = dp_sgd_privacy.compute_dp_sgd_privacy(
      population_size, batch_size, 2 * sigma, epochs, delta,
      sampling=accountant_sampling)
  return eps


def _check_choices(as_published, **kwargs):
  allowed = {"method": METHODS, "clipping_unit": CLIPPING_UNITS,
             "sampling": tuple(Sampling), "learning_rate_decay": DECAYS}
  for name, value in kwargs.items():
    checks.check_choice(name, value, allowed[name])
  if (kwargs["clipping_unit"] == "batch"
      and kwargs["sampling"] == Sampling.POISSON):
    raise ValueError(
        "clipping_unit='batch' needs sampling='fixed_size' (or "
        "'shuffled'): a batch clipped as a whole is one record, and Poisson "
        "samples have no fixed records. Use clipping_unit='per_example' "
        "with Poisson sampling.")
  if kwargs["method"] == "rdp" and as_published:
    raise ValueError("as_published applies to method='ac' or 'zcdp' (the "
                     "paper's accountings), not to method='rdp'.")


def _calibrate(noise_multiplier, epsilon, delta, n, batch_size, iterations,
               sampling, method, as_published):
  """Returns (sigma, the epsilon that ``method`` claims for it)."""
  nu = batch_size / n
  if noise_multiplier is None:
    if epsilon is None or delta is None:
      raise ValueError("Give noise_multiplier (sigma), or epsilon and delta.")
    if method == "rdp":
      noise_multiplier = _rdp_sigma(epsilon, delta, n, batch_size,
                                    iterations, sampling)
    else:
      noise_multiplier = dpd_accounting.dpd_noise_multiplier(
          epsilon, delta, nu, iterations, method, as_published)
  if delta is None:
    return noise_multiplier, None
  if method == "rdp":
    return noise_multiplier, _rdp_epsilon(noise_multiplier, delta, n,
                                          batch_size, iterations, sampling)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    return noise_multiplier, dpd_accounting.dpd_epsilon(
        noise_multiplier, delta, nu, iterations, method, as_published)


def make_dpd_optimizer(population_size, batch_size, epochs, l2_norm_clip,
                       learning_rate, noise_multiplier=None, epsilon=None,
                       delta=None, method="rdp", as_published=False,
                       clipping_unit="per_example", sampling=Sampling.POISSON,
                       learning_rate_decay="epoch", keras=None):
  """A DPD optimizer and a description of its privacy.

  Privacy contract: every iteration clips (per example, or the batch as a
  whole: ``clipping_unit``) to ``l2_norm_clip`` = C, adds
  N(0, 4 C^2 sigma^2 I) once and records in the ledger the sample
  (``sampling``, sampling probability
  ``nu = batch_size / population_size``) and a sum query whose noise
  multiplier relative to the recorded clip is ``2 sigma``. The proven epsilon
  is ``tf_dp.analysis.compute_epsilon_from_ledger(optimizer.ledger, delta)``.

  Args:
    population_size: N, the number of training examples.
    batch_size: S (the expected sample size under Poisson sampling).
    epochs: E, passes over the data; the run has
      ``dpd_iterations(N, S, E, sampling)`` iterations.
    l2_norm_clip: C.
    learning_rate: eta_0; ``eta_t = eta_0 / t`` (gamma = 1), with t the data
      pass (``learning_rate_decay="epoch"``, the paper's "per round") or the
      iteration (``"step"``).
    noise_multiplier: sigma (noise stddev / 2C). Or give ``epsilon`` and
      ``delta`` and sigma is calibrated by ``method``.
    epsilon: Target epsilon (with ``delta``).
    delta: Target delta; given alone, ``info`` carries the epsilon that
      ``method`` claims for the given sigma.
    method: ``"rdp"`` (default: tf_dp's own accountant for the run
      performed; despite the name, its default PLD accountant, which
      ``compute_epsilon_from_ledger`` also uses), ``"zcdp"`` or ``"ac"``
      (the paper's Section 4.3 formulas, composed over the iterations
      unless ``as_published``).
    as_published: Compose the paper's accounting over data passes, as its
      reported sigma values do (warns; the claimed epsilon does not hold).
    clipping_unit: ``"per_example"`` or ``"batch"``: what is clipped to C
      as one record (see the module docstring).
    sampling: ``"poisson"`` (train on ``tf_dp.data.poisson_sampled_batches(x,
      y, info["sampling_probability"], info["iterations"])`` in ONE Keras
      epoch), ``"fixed_size"`` (train on
      ``tf_dp.data.fixed_size_sampled_batches(x, y, S,
      info["iterations"])``) or ``"shuffled"``: the sampling that matches
      ``fit(x, y, batch_size=S, epochs=E)`` on arrays (Keras's shuffled
      batches; same epsilon as fixed-size, by the conventional
      approximation, with a warning from the accountant). ``fit`` on
      arrays refuses ``"poisson"`` and ``"fixed_size"``.
    learning_rate_decay: ``"epoch"`` or ``"step"``.
    keras: The Keras module (default: Keras 3 if installed, else tf-keras).

  Returns:
    ``(optimizer, info)``; info (a dict) has ``sigma``, ``iterations``,
    ``sampling_probability``, ``claimed_epsilon`` (by ``method``),
    ``method``, ``as_published``, ``clipping_unit``, ``sampling`` and
    ``steps_per_pass``.

  Raises:
    ValueError: on an unknown choice, or a combination that cannot be
      accounted (batch clipping with Poisson sampling).
  """
  _check_choices(method=method, clipping_unit=clipping_unit,
                 sampling=sampling, learning_rate_decay=learning_rate_decay,
                 as_published=as_published)
  keras = keras or backend.default().module()
  n = int(population_size)
  nu = batch_size / n
  iterations = dpd_iterations(n, batch_size, epochs, sampling)
  sigma, claimed = _calibrate(noise_multiplier, epsilon, delta, n,
                              batch_size, iterations, sampling, method,
                              as_published)
  steps_per_pass = max(1, int(round(iterations / max(epochs, 1e-12))))
  # clipping_unit="per_example": the optimizer divides the noised sum by S
  # (or q N = S), so S eta_t / 2 applies (eta_t / 2) to the sum. "batch":
  # the record is the batch mean clipped to C / N, so N eta_t / 2 applies
  # (eta_t / 2) to the clipped full-data-scale gradient.
  per_example = clipping_unit == "per_example"
  scale = batch_size if per_example else n
  schedule = dpd_learning_rate(
      keras, scale * learning_rate / 2,
      steps_per_pass if learning_rate_decay == "epoch" else 1)
  optimizer = DPOptimizer(
      keras.optimizers.SGD(schedule),
      l2_norm_clip=l2_norm_clip if per_example else l2_norm_clip / n,
      noise_multiplier=2 * sigma,
      num_microbatches=None if per_example else 1,
      population_size=n, sampling=sampling,
      sampling_probability=nu if sampling == Sampling.POISSON else None,
      max_lots=iterations + 10)
  info = dict(sigma=sigma, iterations=iterations, sampling_probability=nu,
              claimed_epsilon=claimed, method=method,
              as_published=as_published, clipping_unit=clipping_unit,
              sampling=sampling, steps_per_pass=steps_per_pass)
  return optimizer, info
