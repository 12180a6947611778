"""Membership-inference metrics against closed forms: two Gaussians
N(d, 1) (members) and N(0, 1) (non-members) have AUC Φ(d/√2), TPR
Φ(d − Φ⁻¹(1 − FPR)) at each FPR, advantage 2Φ(d/2) − 1, and are μ-GDP with
μ = d (Dong, Roth & Su 2019), which fixes the true ε at each δ."""

import math

import numpy as np
import pytest
from scipy import optimize
from scipy import stats

from tf_dp.analysis import membership_inference as mi
from tf_dp.analysis import one_run


def gaussians(d, n, seed=0):
  rng = np.random.default_rng(seed)
  return rng.normal(d, 1.0, n), rng.normal(0.0, 1.0, n)


def gdp_epsilon(mu, delta):
  """ε of μ-GDP at δ: δ = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2)."""
  gap = lambda e: (stats.norm.cdf(-e / mu + mu / 2) - math.exp(e)
                   * stats.norm.cdf(-e / mu - mu / 2) - delta)
  return optimize.brentq(gap, 0.0, 100.0)


def test_roc_of_a_small_case_with_ties_by_hand():
  fpr, tpr, thresholds = mi.roc_curve([3, 2, 2], [2, 1])
  np.testing.assert_allclose(fpr, [0, 0, 0.5, 1])
  np.testing.assert_allclose(tpr, [0, 1 / 3, 1, 1])
  np.testing.assert_allclose(thresholds, [np.inf, 3, 2, 1])
  # Pairs (member, non-member): 4 wins and 2 ties (3 vs 2, 3 vs 1, 2 vs 1
  # twice; 2 vs 2 twice) out of 6.
  assert mi.roc_auc([3, 2, 2], [2, 1]) == pytest.approx(5 / 6)


@pytest.mark.parametrize("d", [0.0, 0.5, 1.0, 2.0])
def test_auc_of_two_gaussians(d):
  members, nonmembers = gaussians(d, 2000)
  # Standard error of an AUC near 0.76 from 2000 + 2000 draws: 0.0075
  # (Hanley & McNeil 1982); 0.03 is four of them.
  assert mi.roc_auc(members, nonmembers) == pytest.approx(
      stats.norm.cdf(d / math.sqrt(2)), abs=0.03)
  # The Mann-Whitney statistic of the same draws, exactly.
  u = stats.mannwhitneyu(members, nonmembers).statistic
  assert mi.roc_auc(members, nonmembers) == pytest.approx(u / 2000 ** 2)


def test_auc_counts_ties_one_half():
  rng = np.random.default_rng(1)
  members, nonmembers = rng.integers(0, 4, 300), rng.integers(0, 3, 300)
  u = stats.mannwhitneyu(members, nonmembers).statistic
  assert mi.roc_auc(members, nonmembers) == pytest.approx(u / 300 ** 2)


@pytest.mark.parametrize("fpr", [0.001, 0.01, 0.1])
def test_tpr_at_fpr_of_two_gaussians(fpr):
  members, nonmembers = gaussians(2.0, 20000)
  expected = stats.norm.cdf(2.0 - stats.norm.ppf(1 - fpr))
  # With 20000 non-members the threshold's own FPR is off by at most
  # ~sqrt(fpr/20000); at the steepest point (fpr 0.001) that moves TPR by
  # about 0.02; the TPR's binomial error adds ~0.003.
  assert mi.tpr_at_fpr(members, nonmembers, fpr) == pytest.approx(
      expected, abs=0.03)


def test_advantage_of_two_gaussians():
  members, nonmembers = gaussians(1.0, 20000)
  # max TPR − FPR is reached at the threshold d/2; the empirical max of
  # 20000 + 20000 draws lies within ~0.015 of it (a Kolmogorov-Smirnov
  # statistic's spread).
  assert mi.membership_advantage(members, nonmembers) == pytest.approx(
      2 * stats.norm.cdf(0.5) - 1, abs=0.02)


def test_clopper_pearson_at_zero_and_all_successes():
  # No success in n trials: the upper end solves (1 − p)^n = alpha / 2.
  assert mi.clopper_pearson(0, 10, 0.05) == pytest.approx(
      (0.0, 1 - 0.025 ** 0.1))
  assert mi.clopper_pearson(10, 10, 0.05) == pytest.approx(
      (0.025 ** 0.1, 1.0))
  lo, hi = mi.clopper_pearson(np.array([0, 5, 10]), 10, 0.05)
  np.testing.assert_allclose(lo[[0, 2]], [0.0, 0.025 ** 0.1])
  assert lo[1] < 0.5 < hi[1]


def test_epsilon_lower_bound_of_a_perfect_test_by_hand():
  # Every member found, no false positive: TPR_low = (alpha/4)^(1/n) and
  # FPR_high = 1 − (alpha/4)^(1/n), each at alpha/2 two-sided.
  n, delta = 100, 1e-5
  low = 0.0125 ** (1 / n)
  assert mi.epsilon_lower_bound(n, n, 0, n, delta) == pytest.approx(
      math.log((low - delta) / (1 - low)))
  # A test no better than chance proves nothing.
  assert mi.epsilon_lower_bound(50, 100, 50, 100, delta) == 0.0


@pytest.mark.parametrize("d,at_least", [(1.0, 0.8), (2.0, 2.5)])
def test_empirical_epsilon_is_below_the_truth_and_finds_some(d, at_least):
  delta = 1e-5
  members, nonmembers = gaussians(d, 2000, seed=3)
  bound, _ = mi.empirical_epsilon_lower_bound(members, nonmembers, delta)
  # Sound: below the true ε of d-GDP (4.38 for d = 1, 10.0 for d = 2); and
  # it finds a real part of it with 1000 + 1000 held-out draws (measured
  # 1.19 and 3.18 at this seed).
  assert at_least < bound < gdp_epsilon(d, delta)


def test_empirical_epsilon_of_indistinguishable_scores_is_zero():
  members, nonmembers = gaussians(0.0, 2000, seed=4)
  bound, _ = mi.empirical_epsilon_lower_bound(members, nonmembers, 1e-5)
  assert bound == 0.0


def test_report_collects_the_metrics():
  members, nonmembers = gaussians(1.0, 2000)
  report = mi.membership_inference_report(members, nonmembers, delta=1e-5,
                                          attack="toy")
  assert report.auc == pytest.approx(mi.roc_auc(members, nonmembers))
  assert report.advantage == pytest.approx(
      mi.membership_advantage(members, nonmembers))
  # 2000 non-members resolve FPRs down to 1/2000: all three defaults.
  assert list(report.tpr_at_fpr) == [0.001, 0.01, 0.1]
  assert report.tpr_at_fpr[0.1] == pytest.approx(
      mi.tpr_at_fpr(members, nonmembers, 0.1))
  assert report.epsilon_lower_bound == pytest.approx(
      mi.empirical_epsilon_lower_bound(members, nonmembers, 1e-5)[0])
  assert "toy: 2000 members" in str(report)
  # 500 non-members cannot resolve 0.001: left out unless asked for.
  small = mi.membership_inference_report(members, nonmembers[:500],
                                         delta=1e-5)
  assert list(small.tpr_at_fpr) == [0.01, 0.1]


def test_report_puts_the_bound_beside_the_ledger():
  rng = np.random.default_rng(5)
  included = rng.integers(0, 2, 1000).astype(bool)
  scores = rng.normal(size=1000) + 6.0 * included  # Leaks far beyond ε 1.
  report = mi.one_run_audit_report(scores, included, delta=1e-5,
                                   ledger_epsilon=1.0, attack="canaries")
  assert report.one_run == one_run.one_run_audit(scores, included, delta=1e-5)
  assert (report.num_members, report.num_nonmembers) == (
      included.sum(), (~included).sum())
  assert report.ledger_epsilon == 1.0
  assert report.one_run.epsilon_lower_bound > 4.0  # Measured 4.47.
  assert report.contradicts_ledger
  text = str(report)
  assert text.startswith("canaries: ")
  assert f"; {report.one_run}; ledger ε = 1.000 (BELOW the one-run" in text
  # A ledger ε above the bound is not contradicted, and says so by silence.
  honest = mi.one_run_audit_report(scores, included, delta=1e-5,
                                   ledger_epsilon=20.0)
  assert not honest.contradicts_ledger
  assert str(honest).endswith("ledger ε = 20.000")
  # Without a ledger ε there is nothing to contradict.
  assert not mi.one_run_audit_report(scores, included,
                                     delta=1e-5).contradicts_ledger


@pytest.mark.parametrize("call,match", [
    (lambda: mi.roc_auc([1.0, np.nan], [0.0]), "member_scores holds 1 NaN"),
    (lambda: mi.roc_auc([1.0], np.ones((2, 2))), "nonmember_scores must be "
     "a 1-d array"),
    (lambda: mi.roc_auc([], [1.0]), "member_scores must hold at least 1"),
    (lambda: mi.roc_auc(["a"], [1.0]), "member_scores must be a 1-d array "
     "of real numbers"),
    (lambda: mi.tpr_at_fpr([1.0] * 5, [0.0] * 500, 0.001),
     r"fpr=0.001 needs at least 1000 non-member examples.*got 500"),
    (lambda: mi.tpr_at_fpr([1.0], [0.0], 1.5), "fpr must be"),
    (lambda: mi.membership_inference_report([1.0, 2.0], [0.0, 1.0],
                                            delta=1e-5, fprs=[0.01]),
     "fpr=0.01 needs at least 100"),
    (lambda: mi.membership_inference_report([1.0, 2.0], [0.0, 1.0],
                                            delta=2.0), "delta must lie"),
    (lambda: mi.plot_roc([]), "reports must be a MembershipInferenceReport"),
    (lambda: mi.one_run_audit_report([1.0, 2.0, 3.0], [True, False, False],
                                     delta=1e-5),
     "at least 2 included canaries; got 1 of 3"),
    (lambda: mi.one_run_audit_report([1.0, 2.0, 3.0, 4.0],
                                     [True, False, True, False], delta=1e-5,
                                     ledger_epsilon=-1.0),
     "ledger_epsilon must be"),
])
def test_bad_input_is_refused_naming_the_argument(call, match):
  with pytest.raises(ValueError, match=match):
    call()


def test_plot_roc_draws_log_log_axes():
  matplotlib = pytest.importorskip("matplotlib")
  matplotlib.use("Agg")
  members, nonmembers = gaussians(1.0, 500)
  reports = [mi.membership_inference_report(members, nonmembers, delta=1e-5,
                                            attack="a"),
             mi.membership_inference_report(nonmembers, members, delta=1e-5,
                                            attack="b")]
  figure = mi.plot_roc(reports)
  ax = figure.axes[0]
  assert ax.get_xscale() == ax.get_yscale() == "log"
  labels = [line.get_label() for line in ax.get_lines()]
  assert labels == [f"a (AUC {reports[0].auc:.3f})",
                    f"b (AUC {reports[1].auc:.3f})", "chance"]
  # The curve is the report's ROC, zeros drawn at the axis floor 1/1000.
  x, y = ax.get_lines()[0].get_data()
  np.testing.assert_allclose(x, np.maximum(reports[0].fpr, 0.001))
  np.testing.assert_allclose(y, np.maximum(reports[0].tpr, 0.001))
  matplotlib.pyplot.close(figure)


def test_plot_roc_draws_the_ledger_and_one_run_lines():
  matplotlib = pytest.importorskip("matplotlib")
  matplotlib.use("Agg")
  rng = np.random.default_rng(0)
  included = rng.integers(0, 2, 400).astype(bool)
  scores = rng.normal(size=400) + 2.0 * included
  report = mi.one_run_audit_report(scores, included, delta=1e-3,
                                   ledger_epsilon=2.0, attack="a")
  figure = mi.plot_roc([report, report])  # Each ε line once.
  lines = figure.axes[0].get_lines()
  bound = report.one_run.epsilon_lower_bound
  curve = f"a (AUC {report.auc:.3f})"
  assert [line.get_label() for line in lines] == [
      curve, curve, "chance", "ledger ε = 2.00", f"one run: ε >= {bound:.2f}"]
  # Each is TPR = min(1, e^ε FPR + δ) of its ε.
  for line, epsilon in zip(lines[3:], (2.0, bound)):
    x, y = line.get_data()
    np.testing.assert_allclose(y, np.minimum(1.0, np.exp(epsilon) * x + 1e-3))
  matplotlib.pyplot.close(figure)
