"""Clopper-Pearson intervals and the epsilon lower bound of a threshold test."""

import math

import numpy as np
from scipy import stats


def clopper_pearson(successes, trials, alpha):
  """Exact two-sided (1 - alpha) confidence interval of a binomial rate."""
  lo = 0.0 if successes == 0 else stats.beta.ppf(alpha / 2, successes,
                                                 trials - successes + 1)
  hi = 1.0 if successes == trials else stats.beta.ppf(
      1 - alpha / 2, successes + 1, trials - successes)
  return float(lo), float(hi)


def epsilon_lower_bound(false_positives, false_negatives, trials, delta,
                        alpha=0.05):
  """Epsilon lower bound from one test's errors (confidence 1 - alpha).

  Uses the Clopper-Pearson upper bounds on both error rates (each at
  alpha / 2, so the bound holds with probability >= 1 - alpha) in
  ``eps >= max(log((1 - delta - FNR) / FPR), log((1 - delta - FPR) / FNR))``.
  """
  _, fpr = clopper_pearson(false_positives, trials, alpha / 2)
  _, fnr = clopper_pearson(false_negatives, trials, alpha / 2)
  bounds = [0.0]
  for a, b in ((fnr, fpr), (fpr, fnr)):
    if b > 0 and 1 - delta - a > 0:
      bounds.append(math.log((1 - delta - a) / b))
  return max(bounds)


def best_threshold_epsilon_lower_bound(scores_without, scores_with, delta,
                                       alpha=0.05, num_thresholds=200):
  """Lower bound for the test ``score > t`` => "the record is present".

  The threshold is chosen on the first half of the trials and the
  Clopper-Pearson bound is computed on the second half, so choosing the
  threshold does not bias the bound (it holds with probability
  >= 1 - alpha). Returns ``(epsilon_lower, threshold)``.
  """
  without = np.asarray(scores_without, dtype=float)
  with_ = np.asarray(scores_with, dtype=float)
  half = min(len(without), len(with_)) // 2
  pick_without, test_without = without[:half], without[half:2 * half]
  pick_with, test_with = with_[:half], with_[half:2 * half]
  lo, hi = np.percentile(np.concatenate([pick_without, pick_with]),
                         [0.5, 99.5])
  best_t, best_eps = None, -1.0
  for t in np.linspace(lo, hi, num_thresholds):
    eps = epsilon_lower_bound(int(np.sum(pick_without > t)),
                              int(np.sum(pick_with <= t)), half, delta, alpha)
    if eps > best_eps:
      best_t, best_eps = float(t), eps
  final = epsilon_lower_bound(int(np.sum(test_without > best_t)),
                              int(np.sum(test_with <= best_t)), half, delta,
                              alpha)
  return final, best_t
