"""Differentially private PCA (Abadi et al. 2016, Sec. 4).

Inputs are normalised to unit L2 norm, so each record's contribution to the
second-moment matrix, ``x x^T``, has Frobenius norm exactly 1. The upper
triangle of ``sum_i x_i x_i^T`` (norm <= 1 per record) is released with a
``GaussianSumQuery`` (clip 1, noise stddev ``noise_multiplier``); mirroring
the noised triangle gives a symmetric noise matrix. The principal
directions of the noised matrix are post-processing. With a ledger, the
release is one ledger sample (population n, the sampling probability used).
"""

import numpy as np
import tensorflow as tf

from tf_dp.dp_query.gaussian_query import GaussianSumQuery
from tf_dp.privacy_ledger import QueryWithLedger


def dp_principal_directions(x, num_components, noise_multiplier, ledger=None,
                            sampling_probability=1.0, noise_seed=None):
  """Top ``num_components`` principal directions of ``x``, computed with DP.

  Privacy contract: every row of ``x`` (one record) contributes the upper
  triangle of ``u u^T`` with ``u = x / ||x||`` (L2 norm <= 1); Gaussian noise
  of stddev ``noise_multiplier`` is added once to each summed entry. If
  ``ledger`` is given, one sample is recorded with selection probability
  ``sampling_probability`` (the caller's sampling of ``x`` from the dataset;
  1.0 when ``x`` is the whole dataset) and one sum query (1, noise).

  Args:
    x: ``[n, d]`` array.
    num_components: k <= d.
    noise_multiplier: Noise stddev (the record norm bound is 1), >= 0.
    ledger: Optional ``tf_dp.PrivacyLedger``.
    sampling_probability: Recorded in the ledger with this release.
    noise_seed: None for OS entropy (default).

  Returns:
    ``(directions [d, k], eigenvalues [k])`` of the noised second-moment
    matrix, by decreasing eigenvalue.
  """
  x = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
  n, d = x.shape
  if not 1 <= num_components <= d:
    raise ValueError(f"num_components must lie in [1, {d}]; got "
                     f"{num_components!r}.")
  norms = np.linalg.norm(x, axis=1, keepdims=True)
  units = np.where(norms > 0, x / np.where(norms > 0, norms, 1.0), 0.0)
  upper = np.triu_indices(d)
  second_moment = (units.T @ units)[upper].astype(np.float32)
  query = GaussianSumQuery(1.0, noise_multiplier, noise_seed)
  if ledger is not None:
    ledger.set_sample_size(selection_probability=sampling_probability)
    query = QueryWithLedger(query, ledger)
  noised, _, _ = query.get_noised_result(tf.constant(second_moment),
                                         query.initial_global_state())
  matrix = np.zeros((d, d))
  matrix[upper] = np.asarray(noised, dtype=np.float64)
  matrix = matrix + np.triu(matrix, 1).T
  values, vectors = np.linalg.eigh(matrix)
  order = np.argsort(values)[::-1][:num_components]
  del n
  return vectors[:, order].astype(np.float32), values[order]
