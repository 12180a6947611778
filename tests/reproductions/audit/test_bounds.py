"""Clopper-Pearson intervals and the epsilon lower bound of a threshold test."""

import math

import numpy as np
import pytest
from scipy import stats

from tf_dp.reproductions.audit import bounds


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
