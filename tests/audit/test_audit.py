"""Audits: exact intervals, and lower bounds that hold and can fail."""

import math

import numpy as np
import pytest
from scipy import stats

from tf_dp.audit import ClipOffQuery
from tf_dp.audit import NoiseOffQuery
from tf_dp.audit import bounds
from tf_dp.audit import dpsgd_audit
from tf_dp.audit import gaussian_audit
from tf_dp.dp_query import GaussianSumQuery
from tests.keras import helpers


def test_clopper_pearson_known_values():
  # 0 of n: upper bound 1 - (alpha/2)^(1/n) (exact binomial tail).
  lo, hi = bounds.clopper_pearson(0, 100, 0.05)
  assert lo == 0 and hi == pytest.approx(1 - 0.025 ** (1 / 100))
  lo, hi = bounds.clopper_pearson(50, 100, 0.05)
  assert stats.binom.sf(49, 100, lo) == pytest.approx(0.025, rel=1e-6)
  assert stats.binom.cdf(50, 100, hi) == pytest.approx(0.025, rel=1e-6)


def test_lower_bound_formula():
  # With no errors in 1000 trials the bound is log((1-d-ub)/ub).
  ub = 1 - 0.0125 ** (1 / 1000)
  assert bounds.epsilon_lower_bound(0, 0, 1000, 1e-5) == pytest.approx(
      math.log((1 - 1e-5 - ub) / ub))
  # Chance-level errors give no evidence.
  assert bounds.epsilon_lower_bound(500, 500, 1000, 1e-5) == 0.0


def test_indistinguishable_scores_give_zero():
  rng = np.random.default_rng(0)
  lower, _ = bounds.best_threshold_epsilon_lower_bound(
      rng.normal(size=20000), rng.normal(size=20000), 1e-5)
  assert lower < 0.1


def test_gaussian_audit_is_below_and_close_to_the_claim():
  claimed, lower = gaussian_audit.audit_gaussian_sum_query(
      GaussianSumQuery(1.0, 2.0), 2.0, trials=100000)
  assert lower < claimed
  assert lower > 0.4 * claimed  # the test is not vacuous (measured ~0.55).


def test_gaussian_audit_catches_missing_noise():
  claimed, lower = gaussian_audit.audit_gaussian_sum_query(
      NoiseOffQuery(1.0, 2.0), 2.0, trials=2000)
  assert lower > claimed


@pytest.mark.parametrize("K", helpers.keras_modules()[:1])
def test_dp_sgd_step_audit_holds_and_broken_mechanisms_fail(K):
  claimed, lower = dpsgd_audit.audit_dp_sgd_step(K, 2.0, trials=2000)
  assert 0 <= lower < claimed
  for broken in (NoiseOffQuery(1.0, 2.0), ClipOffQuery(1.0, 2.0)):
    claimed_b, lower_b = dpsgd_audit.audit_dp_sgd_step(
        K, 2.0, trials=300, dp_query=broken)
    assert claimed_b == pytest.approx(claimed)  # the ledger is fooled...
    assert lower_b > claimed_b                  # ...the audit is not.


@pytest.mark.slow
@pytest.mark.parametrize("K", helpers.keras_modules())
def test_fit_audit_with_a_string_loss_and_accumulation_holds(K):
  # One lot of make_private + fit (loss "mse", 2 batches per lot): the
  # claim is the single-release epsilon of noise multiplier 2 (exactly 1.99;
  # 2.17 by RDP); the lower bound from 200 trials per side stays below it.
  claimed, lower = dpsgd_audit.audit_dp_sgd_fit(K, 2.0, trials=200)
  assert 1.98 < claimed < 2.18
  assert 0 <= lower < claimed
