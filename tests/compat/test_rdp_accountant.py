"""TF Privacy's ``rdp_accountant_test.py`` values, on the compat module.

Inputs and expected values are TF Privacy's, from
``tensorflow_privacy/privacy/analysis/rdp_accountant_test.py`` (the last
version before the module was removed). No TensorFlow is imported here.
"""

import math

import numpy as np
import pytest

from tf_dp.compat.tensorflow_privacy.privacy.analysis import rdp_accountant


def test_compute_rdp_no_data_no_sampling_scalar():
  """test_compute_rdp_no_data (q 0: RDP 0), test_compute_rdp_no_sampling
  (q 1: alpha / (2 sigma^2) = 0.1 at order 20, noise 10),
  test_compute_rdp_scalar (0.07737 to 5 places)."""
  assert rdp_accountant.compute_rdp(0, 10, 1, 20) == 0
  assert rdp_accountant.compute_rdp(1, 10, 1, 20) == pytest.approx(0.1,
                                                                  rel=1e-12)
  assert rdp_accountant.compute_rdp(0.1, 2, 10, 5) == pytest.approx(
      0.07737, abs=5e-6)


def test_compute_heterogeneous_rdp_different_sampling_probabilities():
  """test_compute_heterogeneous_rdp_different_sampling_probabilities: 0.1."""
  assert rdp_accountant.compute_heterogeneous_rdp(
      [0, 1], [10, 10], [1, 1], 20) == pytest.approx(0.1, rel=1e-12)


def test_compute_rdp_sequence():
  """test_compute_rdp_sequence: TF Privacy's 5-digit values (rtol 1e-4)."""
  got = rdp_accountant.compute_rdp(0.01, 2.5, 50,
                                   [1.5, 2.5, 5, 50, 100, np.inf])
  np.testing.assert_allclose(
      got, [6.5007e-04, 1.0854e-03, 2.1808e-03, 2.3846e-02, 1.6742e+02,
            np.inf], rtol=1e-4)


def test_get_privacy_spent_pure_dp():
  """test_get_privacy_spent_check_target_delta / _target_eps: constant RDP
  1.1 on orders 2..32 picks order 32 and eps 1.32783806176 at delta 1e-5;
  back again, delta 1e-5 at that eps."""
  orders = range(2, 33)
  with pytest.warns(RuntimeWarning, match="largest order"):  # As it should.
    eps, _, order = rdp_accountant.get_privacy_spent(orders, [1.1] * 31,
                                                     target_delta=1e-5)
  assert order == 32
  assert eps == pytest.approx(1.32783806176, abs=1e-9)
  with pytest.warns(RuntimeWarning, match="largest order"):
    _, delta, order = rdp_accountant.get_privacy_spent(
        orders, [1.1] * 31, target_eps=1.32783806176)
  assert order == 32
  assert delta == pytest.approx(1e-5, rel=1e-8)


def test_get_privacy_spent_gaussian():
  """Second half of the same tests: noise 4.530877117, one release, no
  sampling, orders 1.001..99.999: exactly (1, 1e-6)-DP by the tight
  conversion (TF Privacy asserts 7 places)."""
  orders = [0.001 * i for i in range(1001, 100000)]
  curve = rdp_accountant.compute_rdp(1, 4.530877117, 1, orders)
  eps, _, _ = rdp_accountant.get_privacy_spent(orders, curve,
                                               target_delta=1e-6)
  assert eps == pytest.approx(1.0, abs=5e-7)
  _, delta, _ = rdp_accountant.get_privacy_spent(orders, curve, target_eps=1)
  assert delta == pytest.approx(1e-6, abs=5e-8)


def test_without_replacement_is_the_safe_bound():
  """tf_dp's fixed-size bound (sensitivity 2C) is never below the
  Poisson one at the same q and noise (sensitivity C)."""
  orders = [2, 5, 50]
  wor = rdp_accountant.compute_rdp_sample_without_replacement(0.01, 2.5, 50,
                                                              orders)
  poisson = rdp_accountant.compute_rdp(0.01, 2.5, 50, orders)
  assert np.all(wor >= poisson) and math.isfinite(wor[0])
