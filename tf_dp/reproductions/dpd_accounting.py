"""Privacy accounting of differentially private dropout (Ermis & Cemgil 2017).

A paper reproduction, kept apart from the proven accountants of
``tf_dp.analysis``: the paper's Section 4.3, as stated there. Each
iteration releases the clipped minibatch gradient (L2 sensitivity 2C) plus
N(0, 4 C^2 sigma^2 I): a Gaussian mechanism with noise multiplier ``sigma``
relative to its sensitivity, on a sample in which each record is with
probability ``nu`` (the ``sampling_probability``; the paper's sampling
rate S / N). Pure Python: no TensorFlow.

* DPD-AC: the classical Gaussian mechanism gives
  ``eps_iter = sqrt(2 log(1.25/delta_iter)) / sigma`` for the sample;
  amplification by sampling (eq. (7)) gives
  ``eps' = log(1 + nu (e^eps_iter - 1))``, ``delta' = nu delta_iter``; the
  advanced composition theorem over k steps gives
  ``eps = sqrt(2 k log(1/delta_ac)) eps' + k eps' (e^eps' - 1)``.
* DPD-zCDP: the amplified (eps', delta') step is read as a Gaussian of
  variance ``tau = 2 log(1.25/delta') Delta^2 / eps'^2`` (eq. (6)), i.e.
  ``rho = eps'^2 / (4 log(1.25/delta'))``-zCDP; J steps compose to J rho
  (Bun & Steinke, Lemma 1.7) and convert back with Prop. 1.3.

Deltas are split as ``delta_iter = delta_ac = delta / (k + 1)``, so that
``k nu delta_iter + delta_ac <= delta``.

Composition runs over the ``iterations`` actually performed. The paper's
reported noise levels come out only with ``as_published=True``, which
composes over the ``E = iterations * nu`` data passes instead and warns,
because it does not deliver the claimed epsilon:

* DPD-AC: k = E, the delta split above: MNIST (nu = 0.01, E = 200,
  delta = 1e-4, eps = 0.5) gives sigma = 10.876 (paper: 10.88).
* DPD-zCDP: J = E, ``delta_iter = delta / T`` (T = iterations; the split the
  paper states for DPD-AC) and the paper's approximate conversion
  ``eps = 2 sqrt(rho log(1/delta))`` (Prop. 1.3 without its ``rho`` term,
  i.e. ``rho = eps^2 / (4 log(1/delta))``): sigma = 3.228 (paper: 3.23).
  The exact conversion in the same recipe gives 3.248; the honest delta
  split over E passes gives 2.979.

The zCDP chain is the paper's heuristic (an (eps, delta)-DP step is not
rho-zCDP in general); for a proven guarantee use the RDP accountant on the
run's ledger.
"""

import math
import warnings

import numpy as np
from scipy import optimize

from tf_dp.analysis import checks
from tf_dp.analysis import search

METHODS = ("ac", "zcdp")
# The largest sigma dpd_noise_multiplier probes (the largest power of two
# below 1e7).
MAX_NOISE_MULTIPLIER = 2 ** 23


def _compositions(nu, iterations, as_published):
  if as_published:
    warnings.warn(
        "as_published=True composes over data passes (iterations * "
        "sampling_probability), as Ermis & Cemgil's reported noise levels "
        "do; the run performs `iterations` releases, so the claimed epsilon "
        "does not hold. Use it only to compare with the paper.", UserWarning,
        stacklevel=3)
    return max(1, int(round(iterations * nu)))
  return iterations


def _amplified_step(sigma, nu, delta_iter):
  """(eps', delta') of one iteration: Gaussian mechanism, then eq. (7)."""
  eps_iter = math.sqrt(2 * math.log(1.25 / delta_iter)) / sigma
  return math.log1p(nu * math.expm1(min(eps_iter, 700.0))), nu * delta_iter


def dpd_epsilon(noise_multiplier, delta, sampling_probability, iterations,
                method="zcdp", as_published=False):
  """Epsilon that the paper's accounting gives for noise ``sigma``.

  Privacy contract: none beyond the paper's own (see the module docstring);
  with ``as_published=True`` not even that, since it composes over data
  passes instead of iterations (it warns).

  Args:
    noise_multiplier: sigma: noise stddev / (2C), the L2 sensitivity.
    delta: Total delta in (0, 1).
    sampling_probability: nu = S / N, the probability that a record is in
      an iteration's sample.
    iterations: Number of iterations T performed.
    method: ``"ac"`` (DPD-AC) or ``"zcdp"`` (DPD-zCDP).
    as_published: Reproduce the paper's reported figures (warns).

  Returns:
    The total epsilon.

  Raises:
    ValueError: on an argument outside its domain (named in the message).
  """
  sigma = checks.check_noise_multiplier("noise_multiplier",
                                        noise_multiplier)
  delta = checks.check_delta("delta", delta)
  nu = checks.check_sampling_probability("sampling_probability",
                                         sampling_probability)
  iterations = checks.check_positive_int("iterations", iterations)
  method = checks.check_choice("method", method, METHODS)
  k = _compositions(nu, iterations, as_published)
  if nu == 0 or math.isinf(sigma):  # Nothing sampled or nothing released.
    return 0.0
  if method == "zcdp" and as_published:  # The paper's 3.23 (module doc).
    eps_step, delta_step = _amplified_step(sigma, nu, delta / iterations)
    rho = k * eps_step ** 2 / (4 * math.log(1.25 / delta_step))
    return 2 * math.sqrt(rho * math.log(1 / delta))
  eps_step, delta_step = _amplified_step(sigma, nu, delta / (k + 1))
  if method == "ac":
    return (math.sqrt(2 * k * math.log((k + 1) / delta)) * eps_step
            + k * eps_step * math.expm1(eps_step))
  rho = k * eps_step ** 2 / (4 * math.log(1.25 / delta_step))
  return rho + 2 * math.sqrt(rho * math.log(1 / delta))


def dpd_noise_multiplier(epsilon, delta, sampling_probability, iterations,
                         method="zcdp", as_published=False):
  """The sigma at which ``dpd_epsilon`` equals ``epsilon``.

  ``search.bracket`` doubles sigma from 1 until the paper's epsilon is at
  most the target (up to ``MAX_NOISE_MULTIPLIER``); Brent's method then
  finds the root to 1e-10.
  """
  epsilon = checks.check_epsilon("epsilon", epsilon, allow_zero=False)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    f = lambda s: dpd_epsilon(s, delta, sampling_probability, iterations,
                              method, as_published) - epsilon
    _, hi = search.bracket(lambda s: f(s) > 0, start=0,
                           limit=MAX_NOISE_MULTIPLIER)
    if hi is None:
      raise ValueError(f"epsilon={epsilon} is out of reach for this run.")
    sigma = optimize.brentq(f, 1e-6, float(hi), xtol=1e-10, rtol=1e-12)
  if as_published:
    _compositions(sampling_probability, iterations, True)  # warn once, here.
  return sigma


def dpd_dropout_rates(noise_multiplier, l2_norm_clip, weights):
  """Per-weight Gaussian dropout rate alpha implied by the DPD noise.

  The update noise N(0, 4 C^2 sigma^2) equals Gaussian dropout noise
  N(0, alpha theta^2) (Section 4.2), so ``alpha = 4 C^2 sigma^2 / theta^2``.
  """
  noise_multiplier = checks.check_noise_multiplier(
      "noise_multiplier", noise_multiplier, allow_zero=True)
  l2_norm_clip = checks.check_real("l2_norm_clip", l2_norm_clip, low=0.0,
                                   allow_inf=False)
  theta = np.asarray(weights, dtype=float)
  with np.errstate(divide="ignore"):
    return 4 * l2_norm_clip ** 2 * noise_multiplier ** 2 / np.square(theta)
