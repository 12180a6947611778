"""TF Privacy's ``compute_noise_from_budget_lib``, computed by tf_dp's RDP.

Pure Python: no TensorFlow is imported.
"""

import warnings

from tf_dp.analysis import checks
from tf_dp.analysis import search
from tf_dp.compat.tensorflow_privacy.privacy.analysis import compute_dp_sgd_privacy_lib

# Relative precision of the returned noise multiplier.
TOLERANCE = 1e-6


def _rdp_epsilon(n, batch_size, noise_multiplier, epochs, delta):
  with warnings.catch_warnings():  # Edge orders are expected at tiny noise.
    warnings.simplefilter("ignore", RuntimeWarning)
    return compute_dp_sgd_privacy_lib.poisson_rdp_epsilon(
        n, batch_size, noise_multiplier, epochs, delta)[0]


def compute_noise(n, batch_size, target_epsilon, epochs, delta, noise_lbd):
  """Smallest noise multiplier (to 1e-6 relative) meeting ``target_epsilon``.

  Privacy contract: training ``epochs`` passes with Poisson samples of rate
  ``batch_size / n`` and the returned noise multiplier is
  (target_epsilon, delta)-DP by the RDP accounting of
  ``compute_dp_sgd_privacy`` (TF Privacy's orders, tight conversion).
  Shuffled Keras batches need ``tf_dp.analysis.compute_noise_multiplier(...,
  sampling="fixed_size")`` instead.

  Args:
    n, batch_size, target_epsilon, epochs, delta: As TF Privacy's.
    noise_lbd: A lower bound on the noise multiplier, > 0: the search starts
      there.

  Returns:
    The noise multiplier; 0 (with a warning, as TF Privacy printed) if
    ``noise_lbd`` already gives an epsilon below the target.

  Raises:
    ValueError: on an invalid argument, or a target no noise multiplier up
      to 1e4 meets.
  """
  checks.check_dataset(n, batch_size)
  target_epsilon = checks.check_epsilon("target_epsilon", target_epsilon,
                                        allow_zero=False)
  noise_lbd = checks.check_noise_multiplier("noise_lbd", noise_lbd)

  def too_private(z):  # True while z still misses the target.
    return _rdp_epsilon(n, batch_size, z, epochs, delta) > target_epsilon

  if not too_private(noise_lbd):
    warnings.warn(f"noise_lbd={noise_lbd} already gives epsilon <= "
                  f"{target_epsilon}: returning 0, as TF Privacy did. Pass a "
                  "smaller noise_lbd.", UserWarning, stacklevel=2)
    return 0
  _, hi = search.monotone_boundary(too_private, start=noise_lbd,
                                   limit=noise_lbd + 1e4, integer=False,
                                   tolerance=TOLERANCE)
  if hi is None:
    raise ValueError(f"target_epsilon={target_epsilon} cannot be reached with"
                     f" a noise multiplier below {noise_lbd + 1e4:g}.")
  return hi
