"""The audit of a Gaussian sum query: below the claim, and it catches a
query that claims noise it does not add."""

from tf_dp.dp_query import GaussianSumQuery
from tf_dp.reproductions.audit import NoiseOffQuery
from tf_dp.reproductions.audit import gaussian_audit


def test_gaussian_audit_is_below_and_close_to_the_claim():
  claimed, lower = gaussian_audit.audit_gaussian_sum_query(
      GaussianSumQuery(1.0, 2.0), 2.0, trials=100000)
  assert lower < claimed
  assert lower > 0.4 * claimed  # the test is not vacuous (measured ~0.55).


def test_gaussian_audit_catches_missing_noise():
  claimed, lower = gaussian_audit.audit_gaussian_sum_query(
      NoiseOffQuery(1.0, 2.0), 2.0, trials=2000)
  assert lower > claimed
