"""Clopper-Pearson intervals and the epsilon lower bound of a threshold test."""

import numpy as np

from tf_dp.analysis import membership_inference
from tf_dp.analysis.membership_inference import clopper_pearson  # pylint: disable=unused-import


def epsilon_lower_bound(false_positives, false_negatives, trials, delta,
                        alpha=0.05):
  """Epsilon lower bound from one test's errors (confidence 1 - alpha).

  ``trials`` runs without the record and as many with it: the bound of
  ``tf_dp.analysis.membership_inference.epsilon_lower_bound`` (both error
  rates bounded by Clopper-Pearson intervals at alpha / 2) with the runs
  with the record as the members.
  """
  return membership_inference.epsilon_lower_bound(
      trials - false_negatives, trials, false_positives, trials, delta, alpha)


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
