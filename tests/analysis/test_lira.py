"""LiRA and the scores it reads, against closed forms and a toy whose
optimal attack is known."""

import math

import numpy as np
import pytest
from scipy import special
from scipy import stats

from tf_dp.analysis import lira
from tf_dp.analysis import membership_inference as mi


def test_logit_confidence_of_logits_and_probabilities_by_hand():
  logits = np.array([[2.0, 0.0, 0.0], [0.0, 1.0, -1.0]])
  labels = [0, 2]
  # φ = z_y − log Σ_{j≠y} e^{z_j}.
  expected = [2.0 - math.log(2.0), -1.0 - math.log(1.0 + math.e)]
  np.testing.assert_allclose(lira.logit_confidence(logits, labels, True),
                             expected)
  probabilities = special.softmax(logits, axis=1)
  np.testing.assert_allclose(
      lira.logit_confidence(probabilities, labels, False), expected)
  np.testing.assert_allclose(
      lira.cross_entropy(logits, labels, True),
      -np.log(probabilities[[0, 1], labels]))


def test_logit_confidence_of_one_sigmoid_output():
  z = np.array([3.0, -2.0, 0.5])
  labels = np.array([1, 1, 0])
  np.testing.assert_allclose(lira.logit_confidence(z, labels, True),
                             [3.0, -2.0, -0.5])
  np.testing.assert_allclose(
      lira.logit_confidence(special.expit(z)[:, None], labels, False),
      [3.0, -2.0, -0.5])


def test_logit_confidence_stays_finite_where_the_probability_is_one():
  # Logits 100 apart: p_y rounds to 1 in float32, φ is still exact.
  assert lira.logit_confidence([[100.0, 0.0]], [0], True)[0] == 100.0
  assert lira.logit_confidence([[1.0, 0.0]], [0], False)[0] == 40.0


def test_lira_on_a_toy_with_a_known_answer():
  # Each candidate i has its own difficulty μ_i ~ N(0, 3²); training on it
  # moves its φ by d = 2; every model adds N(0, 1) noise. The best attack
  # knows μ_i and has AUC Φ(d/√2) = 0.921; with μ_i estimated from 8
  # shadows per side it is Φ(d/√(2 (1 + 1/8))) = 0.909; one global
  # threshold on φ (the loss attack) gets Φ(d/√(2 (1 + 9))) = 0.673.
  rng = np.random.default_rng(0)
  n, k, d = 2000, 16, 2.0
  difficulty = rng.normal(0.0, 3.0, n)
  membership = lira.random_halves(n, k, seed=1)
  shadows = difficulty + d * membership + rng.normal(size=(k, n))
  is_member = rng.permutation(n) < n // 2
  target = difficulty + d * is_member + rng.normal(size=n)
  with_shadows = stats.norm.cdf(d / math.sqrt(2 * (1 + 1 / 8)))
  # The AUC's standard error here is about 0.0095 (1000 + 1000 draws);
  # per-example variances from 8 draws each cost about 0.02 more.
  for online in (True, False):
    for fix_variance, tolerance in ((True, 0.03), (False, 0.045)):
      scores = lira.lira_scores(target, shadows, membership, online=online,
                                fix_variance=fix_variance)
      auc = mi.roc_auc(*lira.split_scores(scores, is_member))
      assert auc == pytest.approx(with_shadows, abs=tolerance), (
          online, fix_variance)
  global_threshold = mi.roc_auc(*lira.split_scores(target, is_member))
  assert global_threshold == pytest.approx(
      stats.norm.cdf(d / math.sqrt(20)), abs=0.03)


def test_offline_score_is_the_standardised_distance_from_the_out_shadows():
  shadows = np.array([[0.0, 1.0], [2.0, 3.0], [4.0, 9.0], [9.0, 5.0]])
  membership = np.array([[0, 1], [0, 0], [0, 1], [1, 0]], dtype=bool)
  scores = lira.lira_scores([5.0, 6.0], shadows, membership, online=False)
  # Example 0: out φ 0, 2, 4 (mean 2, sd 2); example 1: 3, 5 (mean 4, sd √2).
  np.testing.assert_allclose(scores, [1.5, 2 / math.sqrt(2)])


def test_online_score_is_the_gaussian_log_likelihood_ratio():
  shadows = np.array([[0.0], [2.0], [5.0], [7.0]])
  membership = np.array([[0], [0], [1], [1]], dtype=bool)
  scores = lira.lira_scores([4.0], shadows, membership)
  expected = (stats.norm.logpdf(4.0, 6.0, math.sqrt(2))
              - stats.norm.logpdf(4.0, 1.0, math.sqrt(2)))
  np.testing.assert_allclose(scores, [expected])


def test_random_halves_put_each_example_in_half_of_the_shadows():
  membership = lira.random_halves(1000, 8, seed=2)
  np.testing.assert_array_equal(membership.sum(axis=0), 4)
  # Each shadow holds about half: Binomial-like spread of 500 ± 16.
  assert np.all(np.abs(membership.sum(axis=1) - 500) < 80)
  odd = lira.random_halves(10, 3, seed=2)
  assert odd[-1].sum() == 5


@pytest.mark.parametrize("call,match", [
    (lambda: lira.logit_confidence([[0.5, 0.5]], [2], False),
     r"labels must lie in \[0, 2\)"),
    (lambda: lira.logit_confidence([[0.5, 0.5]], [0, 1], False),
     "labels must hold one class index per example"),
    (lambda: lira.logit_confidence([[np.nan, 0.5]], [0], True),
     "outputs holds NaN"),
    (lambda: lira.logit_confidence([[2.0, 0.5]], [0], False),
     "pass from_logits=True"),
    (lambda: lira.logit_confidence([[2.0, 0.5]], [0.5], True),
     "labels must be integer class indices"),
    (lambda: lira.lira_scores([1.0, 2.0], np.zeros((4, 3)),
                              np.zeros((4, 3), bool)),
     r"shadow_scores must have shape \[shadow models, examples\] = \[k, 2\]"),
    (lambda: lira.lira_scores([1.0], [[1.0], [2.0]], [[True], [False]]),
     "example 0 .* has 1 shadow model.*at least 2.*fix_variance=True"),
    (lambda: lira.lira_scores([1.0], [[1.0], [2.0]], [[True], [True]],
                              online=False, fix_variance=True),
     "example 0 .* has 0 shadow model"),
    (lambda: lira.lira_scores([1.0], [[1.0]], [[True, False]]),
     "shadow_membership must have the shape of shadow_scores"),
    (lambda: lira.split_scores([1.0, 2.0], [True]),
     "is_member must be one boolean per candidate"),
])
def test_bad_input_is_refused_naming_the_argument(call, match):
  with pytest.raises(ValueError, match=match):
    call()
