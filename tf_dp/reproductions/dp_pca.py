"""Differentially private PCA (Abadi et al. 2016, Sec. 4): a reproduction.

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

from tf_dp.analysis import checks
from tf_dp.dp_query.dp_query import DPQuery
from tf_dp.dp_query.gaussian_query import GaussianSumQuery
from tf_dp.privacy_ledger import QueryWithLedger
from tf_dp.privacy_ledger import SamplingEvent


def dp_principal_directions(x, num_components, noise_multiplier, ledger=None,
                            sampling_probability=1.0, noise_seed=None):
  """Top ``num_components`` principal directions of ``x``, computed with DP.

  Privacy contract: every row of ``x`` (one record) contributes the upper
  triangle of ``u u^T`` with ``u = x / ||x||`` (L2 norm <= 1; zeros for a
  row of norm 0 or with a NaN or inf entry); Gaussian noise
  of stddev ``noise_multiplier`` is added once to each summed entry. If
  ``ledger`` is given, one sample is recorded with sampling probability
  ``sampling_probability`` (the caller's sampling of ``x`` from the dataset;
  1.0 when ``x`` is the whole dataset), the ledger's population size,
  sampling kind and examples per record, and one sum query (1, noise). The
  ledger's configured event (for later samples) is left as it was.

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
  d = x.shape[1]
  num_components = checks.check_positive_int("num_components",
                                             num_components)
  if num_components > d:
    raise ValueError(f"num_components must lie in [1, {d}] (the number of "
                     f"features); got {num_components!r}.")
  norms = np.linalg.norm(x, axis=1, keepdims=True)
  # A row with a NaN or inf contributes zeros (as GaussianSumQuery's
  # clipping makes it), never a NaN that would poison the whole release.
  usable = (norms > 0) & np.all(np.isfinite(x), axis=1, keepdims=True)
  units = np.where(usable, x / np.where(usable, norms, 1.0), 0.0)
  upper = np.triu_indices(d)
  second_moment = (units.T @ units)[upper].astype(np.float32)
  query: DPQuery = GaussianSumQuery(1.0, noise_multiplier, noise_seed)
  if ledger is not None:
    query = QueryWithLedger(query, ledger, SamplingEvent(
        population_size=int(ledger.population_size.numpy()),
        sampling_probability=checks.check_probability(
            "sampling_probability", sampling_probability),
        sampling=ledger.sampling,
        examples_per_record=int(ledger.examples_per_record.numpy())))
  noised, _, _ = query.get_noised_result(tf.constant(second_moment),
                                         query.initial_global_state())
  matrix = np.zeros((d, d))
  matrix[upper] = np.asarray(noised, dtype=np.float64)
  matrix = matrix + np.triu(matrix, 1).T
  values, vectors = np.linalg.eigh(matrix)
  order = np.argsort(values)[::-1][:num_components]
  return vectors[:, order].astype(np.float32), values[order]
