"""DP-PCA: exact subspace without noise, one ledger entry, noise scale."""

import numpy as np
import pytest

from tf_dp import analysis
from tf_dp.reproductions.dp_pca import dp_principal_directions
from tf_dp.privacy_ledger import PrivacyLedger


def _data(n=2000, d=20, k=3, seed=0):
  rng = np.random.default_rng(seed)
  basis = np.linalg.qr(rng.normal(size=(d, k)))[0]
  x = rng.normal(size=(n, k)) * [10.0, 6.0, 3.0] @ basis.T
  return x + 0.1 * rng.normal(size=(n, d)), basis


def _principal_angles_sin(a, b):
  s = np.linalg.svd(a.T @ b, compute_uv=False)
  return np.sqrt(np.maximum(0.0, 1 - np.min(s) ** 2))


def test_zero_noise_recovers_the_true_principal_subspace():
  x, _ = _data()
  norms = np.linalg.norm(x, axis=1, keepdims=True)
  units = x / norms
  _, _, vt = np.linalg.svd(units, full_matrices=False)
  with pytest.warns(UserWarning):  # fixed noise seed
    dirs, _ = dp_principal_directions(x, 3, 0.0, noise_seed=1)
  # The release is float32 (like the training queries): ~1e-4 agreement.
  assert _principal_angles_sin(dirs, vt[:3].T) < 1e-3


def test_a_non_finite_row_contributes_nothing():
  # Without noise, a row holding an inf (or a NaN) changes no eigenvalue:
  # it must not turn the release into NaN (a change of one record that the
  # noise cannot hide).
  x, _ = _data(n=200, d=5)
  hostile = np.concatenate([x, [[np.inf, 1.0, 0.0, 0.0, 0.0]],
                            [[np.nan, 1.0, 0.0, 0.0, 0.0]]])
  with pytest.warns(UserWarning):  # fixed noise seed
    _, clean = dp_principal_directions(x, 5, 0.0, noise_seed=1)
  with pytest.warns(UserWarning):
    _, values = dp_principal_directions(hostile, 5, 0.0, noise_seed=1)
  np.testing.assert_allclose(values, clean, rtol=1e-6, atol=1e-6)


def test_noisy_release_is_close_with_many_records_and_is_one_ledger_entry():
  x, basis = _data(n=20000)
  ledger = PrivacyLedger(60000, 1.0)
  dirs, _ = dp_principal_directions(x, 3, 4.0, ledger=ledger,
                                    sampling_probability=20000 / 60000)
  assert _principal_angles_sin(dirs, basis) < 0.2
  samples = ledger.to_dict()["samples"]
  assert len(samples) == 1
  assert samples[0]["sampling_probability"] == pytest.approx(1 / 3)
  assert samples[0]["sum_queries"] == [
      {"l2_norm_clip": 1.0, "noise_stddev": 4.0}]
  eps, _ = analysis.compute_epsilon_from_ledger(ledger, 1e-5,
                                                accountant="rdp")
  rdp = analysis.compute_rdp(1 / 3, 4.0, 1)
  expected = analysis.get_privacy_spent(analysis.DEFAULT_ORDERS, rdp,
                                        target_delta=1e-5)[0]
  assert eps == pytest.approx(expected, rel=1e-6)


def test_noise_is_symmetric_with_the_configured_stddev():
  # Without data the released matrix is pure noise: symmetric, entries with
  # stddev 2.0 (d = 60: 1830 upper entries; tolerance 10% > 3 sd).
  x = np.zeros((5, 60))
  with pytest.warns(UserWarning):
    dirs, values = dp_principal_directions(x, 60, 2.0, noise_seed=3)
  matrix = dirs @ np.diag(values) @ dirs.T
  np.testing.assert_allclose(matrix, matrix.T, atol=1e-4)
  upper = matrix[np.triu_indices(60)]
  assert np.std(upper) == pytest.approx(2.0, rel=0.1)


def test_invalid_components():
  with pytest.raises(ValueError, match="num_components"):
    dp_principal_directions(np.ones((3, 4)), 5, 1.0)
