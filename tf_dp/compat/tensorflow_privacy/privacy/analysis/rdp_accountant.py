"""TF Privacy's (deprecated) ``rdp_accountant`` module: tf_dp's RDP.

Same functions and arguments (TF Privacy's names: ``q`` is tf_dp's
``sampling_probability``); a scalar order gives a scalar, as in TF
Privacy. Differences:

* ``get_privacy_spent`` uses the tight RDP-to-DP conversion (Balle et al.
  2020), as TF Privacy's last versions did through ``dp_accounting``.
* ``compute_rdp_sample_without_replacement`` is tf_dp's
  ``compute_rdp_fixed_size``: the bound for the replace-one neighbour
  relation with sensitivity 2C (one replaced record
  moves the clipped sum by up to 2C); TF Privacy's was for sensitivity C,
  so tf_dp's values are larger: the safe ones.

Pure Python: no TensorFlow is imported.
"""

import numpy as np

from tf_dp.analysis import conversion
from tf_dp.analysis import rdp
from tf_dp.analysis import rdp_fixed_size


def _with_orders(fn, orders):
  """``fn(list of orders)``, as a scalar if ``orders`` is a scalar."""
  if np.ndim(orders) == 0:
    return float(fn([float(orders)])[0])
  return fn([float(a) for a in orders])


def compute_rdp(q, noise_multiplier, steps, orders):
  """RDP of the Poisson-subsampled Gaussian: ``tf_dp.analysis.compute_rdp``
  with ``sampling_probability=q``."""
  return _with_orders(lambda o: rdp.compute_rdp(q, noise_multiplier, steps, o),
                      orders)


def compute_rdp_sample_without_replacement(q, noise_multiplier, steps, orders):
  """RDP of fixed-size samples, replace-one neighbours, sensitivity 2C:
  ``tf_dp.analysis.compute_rdp_fixed_size`` with
  ``sampling_probability=q``."""
  return _with_orders(
      lambda o: rdp_fixed_size.compute_rdp_fixed_size(
          q, noise_multiplier, steps, o), orders)


def compute_heterogeneous_rdp(sampling_probabilities, noise_multipliers,
                              steps_list, orders):
  """TF Privacy's three parallel lists, as ``tf_dp.analysis.
  compute_heterogeneous_rdp``'s ``(q, noise_multiplier, steps)`` events."""
  if not (len(sampling_probabilities) == len(noise_multipliers)
          == len(steps_list)):
    raise ValueError(
        "sampling_probabilities, noise_multipliers and steps_list must have "
        f"the same length; got {len(sampling_probabilities)}, "
        f"{len(noise_multipliers)} and {len(steps_list)}.")
  events = list(zip(sampling_probabilities, noise_multipliers, steps_list))
  return _with_orders(lambda o: rdp.compute_heterogeneous_rdp(events, o),
                      orders)


def get_privacy_spent(orders, rdp_values, target_eps=None, target_delta=None):
  """``(eps, delta, optimal_order)`` from RDP, tight conversion: ``tf_dp.
  analysis.get_privacy_spent``. Give exactly one target (else ValueError)."""
  orders = np.atleast_1d(np.asarray(orders, float))
  rdp_values = np.atleast_1d(np.asarray(rdp_values, float))
  return conversion.get_privacy_spent(orders, rdp_values, target_eps,
                                      target_delta, conversion="tight")
