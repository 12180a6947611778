"""Membership-inference metrics: how well an attack tells training examples
from held-out ones, and the ε that its success rates prove.

An attack gives every candidate example a score, higher meaning "more likely
a member" (for the loss-threshold attack of Yeom et al. 2018 the score is
minus the example's loss; for LiRA, ``tf_dp.analysis.lira``). Thresholding
the scores of known members and known non-members gives the attack's ROC
curve, its AUC, its TPR at a low FPR (the figure Carlini et al. 2022 ask
for), its membership advantage max(TPR − FPR) (Yeom et al. 2018), and an
empirical lower bound on ε: an (ε, δ)-DP training run forces every test
to have ``TPR <= e^ε FPR + δ`` and ``TNR <= e^ε FNR + δ`` (Kairouz, Oh &
Viswanath 2015), so Clopper–Pearson bounds on the rates give
``ε >= log((TPR_low − δ) / FPR_high)`` (Jagielski, Ullman & Oprea 2020;
Nasr et al. 2021).

Scope of the bound: a report on one trained model treats its examples as
independent trials of one test. That is how Jagielski et al. and Carlini et
al. read such reports, but the examples share the model, so it is a
heuristic, not a certificate. Canaries whose inclusion was drawn at random
before training make one run rigorous (Steinke, Nasr & Jagielski 2023):
their report also carries a ``one_run`` bound (``tf_dp.analysis.one_run``),
which holds with its confidence, and the ledger's ε of that run, which it
must stay below. A heuristic bound above the ledger's ε on a report with
many examples means a bug or a leak worth a look; a bound below it proves
nothing about the guarantee, which rests on the accountant. The ε it is
compared with is the replace-one ε of fixed-size or shuffled lots (members
and non-members are the same pool split in two) or the add/remove ε of
Poisson lots. Pure numpy and scipy; ``plot_roc`` imports matplotlib when
called (``pip install tf_dp[plots]``).
"""

import dataclasses
import math
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np
from scipy import stats

from tf_dp.analysis import checks
from tf_dp.analysis import one_run as one_run_lib

# The FPRs a report reads TPR at, when the caller names none (those that
# the number of non-members can resolve).
DEFAULT_FPRS = (0.001, 0.01, 0.1)


def check_scores(name: str, scores: Any, min_size: int = 1) -> np.ndarray:
  """``scores`` as a 1-d float64 array: finite, at least ``min_size``."""
  try:
    array = np.asarray(scores, dtype=np.float64)
  except (TypeError, ValueError) as error:
    raise ValueError(f"{name} must be a 1-d array of real numbers; got "
                     f"{type(scores).__name__} ({error}).") from None
  if array.ndim != 1:
    raise ValueError(f"{name} must be a 1-d array (one score per example); "
                     f"got shape {array.shape}. Flatten it, or pass one "
                     "score per example.")
  if array.size < min_size:
    raise ValueError(f"{name} must hold at least {min_size} scores; got "
                     f"{array.size}.")
  bad = np.flatnonzero(~np.isfinite(array))
  if bad.size:
    raise ValueError(f"{name} holds {bad.size} NaN or infinite scores (first "
                     f"at index {bad[0]}: {array[bad[0]]}). Drop those "
                     "examples, or fix the model that produced them.")
  return array


def roc_curve(member_scores: Any, nonmember_scores: Any
              ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
  """``(fpr, tpr, thresholds)`` of the tests ``score >= threshold``.

  One point per distinct score, from the strictest threshold (``inf``:
  nothing called a member, the point (0, 0)) to the loosest (every example
  called a member, (1, 1)). Tied scores move together.
  """
  members = check_scores("member_scores", member_scores)
  nonmembers = check_scores("nonmember_scores", nonmember_scores)
  scores = np.concatenate([members, nonmembers])
  is_member = np.concatenate([np.ones(members.size), np.zeros(nonmembers.size)])
  order = np.argsort(-scores, kind="stable")
  scores, is_member = scores[order], is_member[order]
  last_of_tie = np.append(np.flatnonzero(np.diff(scores)), scores.size - 1)
  true_positives = np.cumsum(is_member)[last_of_tie]
  false_positives = np.cumsum(1.0 - is_member)[last_of_tie]
  tpr = np.concatenate([[0.0], true_positives / members.size])
  fpr = np.concatenate([[0.0], false_positives / nonmembers.size])
  thresholds = np.concatenate([[np.inf], scores[last_of_tie]])
  return fpr, tpr, thresholds


def roc_auc(member_scores: Any, nonmember_scores: Any) -> float:
  """Area under the ROC curve: P(member score > non-member score), ties
  counted one half (the Mann–Whitney statistic)."""
  fpr, tpr, _ = roc_curve(member_scores, nonmember_scores)
  return float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2))


def check_fpr(fpr: Any, num_nonmembers: int) -> float:
  """``fpr`` in (0, 1), resolvable with ``num_nonmembers`` examples."""
  value = checks.check_real("fpr", fpr, 0.0, 1.0, low_open=True,
                            high_open=True)
  if num_nonmembers * value < 1:
    raise ValueError(
        f"fpr={value:g} needs at least {math.ceil(1 / value)} non-member "
        f"examples (one false positive among n is an FPR of 1/n); got "
        f"{num_nonmembers}. Pass more non-members, or ask for fpr >= "
        f"{1 / num_nonmembers:.3g}.")
  return value


def tpr_at_fpr(member_scores: Any, nonmember_scores: Any,
               fpr: float) -> float:
  """The largest TPR of a threshold whose FPR is at most ``fpr``."""
  nonmembers = check_scores("nonmember_scores", nonmember_scores)
  target = check_fpr(fpr, nonmembers.size)
  fprs, tprs, _ = roc_curve(member_scores, nonmembers)
  return float(np.max(tprs[fprs <= target]))


def membership_advantage(member_scores: Any, nonmember_scores: Any) -> float:
  """max over thresholds of TPR − FPR (Yeom et al. 2018)."""
  fpr, tpr, _ = roc_curve(member_scores, nonmember_scores)
  return float(np.max(tpr - fpr))


def clopper_pearson(successes: Any, trials: Any,
                    alpha: float) -> Tuple[Any, Any]:
  """Exact two-sided (1 − alpha) confidence interval of a binomial rate.

  ``successes`` may be an array (one interval per entry, same ``trials``).
  """
  k = np.asarray(successes, dtype=np.float64)
  lo = np.where(k == 0, 0.0, stats.beta.ppf(alpha / 2, np.maximum(k, 1),
                                            trials - k + 1))
  hi = np.where(k == trials, 1.0, stats.beta.ppf(1 - alpha / 2, k + 1,
                                                 np.maximum(trials - k, 1)))
  if k.ndim == 0:
    return float(lo), float(hi)
  return lo, hi


def epsilon_lower_bound(true_positives: Any, num_members: int,
                        false_positives: Any, num_nonmembers: int,
                        delta: float, alpha: float = 0.05) -> Any:
  """ε that a test with these counts proves, with confidence 1 − alpha.

  ``max(0, log((TPR_low − δ) / FPR_high), log((TNR_low − δ) / FNR_high))``
  with each rate bounded by a Clopper–Pearson interval at ``alpha / 2``
  (so both hold together with probability >= 1 − alpha). Counts may be
  arrays (one bound per threshold).
  """
  delta = checks.check_delta("delta", delta, allow_zero=True)
  checks.check_real("alpha", alpha, 0.0, 1.0, low_open=True, high_open=True)
  tpr_low, tpr_high = clopper_pearson(true_positives, num_members, alpha / 2)
  fpr_low, fpr_high = clopper_pearson(false_positives, num_nonmembers,
                                      alpha / 2)
  with np.errstate(divide="ignore", invalid="ignore"):
    one = np.log(np.maximum(tpr_low - delta, 0.0) / fpr_high)
    other = np.log(np.maximum(1 - fpr_high - delta, 0.0) / (1 - tpr_low))
  bound = np.maximum(0.0, np.nan_to_num(np.maximum(one, other), nan=0.0,
                                        neginf=0.0))
  return float(bound) if bound.ndim == 0 else bound


def empirical_epsilon_lower_bound(member_scores: Any, nonmember_scores: Any,
                                  delta: float, alpha: float = 0.05,
                                  seed: int = 0) -> Tuple[float, float]:
  """``(ε lower bound, threshold)`` of the attack's best threshold test.

  The threshold is chosen on a random half of the members and of the
  non-members (``seed``) and the bound is computed on the other half, so
  the choice does not inflate the bound.
  """
  members = check_scores("member_scores", member_scores, min_size=2)
  nonmembers = check_scores("nonmember_scores", nonmember_scores, min_size=2)
  rng = np.random.default_rng(seed)
  members, nonmembers = rng.permutation(members), rng.permutation(nonmembers)
  pick_m, test_m = np.array_split(members, 2)
  pick_n, test_n = np.array_split(nonmembers, 2)
  _, _, thresholds = roc_curve(pick_m, pick_n)
  thresholds = thresholds[1:]
  tp = pick_m.size - np.searchsorted(np.sort(pick_m), thresholds, "left")
  fp = pick_n.size - np.searchsorted(np.sort(pick_n), thresholds, "left")
  picked = epsilon_lower_bound(tp, pick_m.size, fp, pick_n.size, delta, alpha)
  threshold = float(thresholds[int(np.argmax(picked))])
  bound = epsilon_lower_bound(int(np.sum(test_m >= threshold)), test_m.size,
                              int(np.sum(test_n >= threshold)), test_n.size,
                              delta, alpha)
  return float(bound), threshold


@dataclasses.dataclass(frozen=True)
class MembershipInferenceReport:
  """What one attack achieved against one model (see the module's doc).

  ``epsilon_lower_bound`` holds with confidence ``1 − alpha`` if the
  examples are independent trials; ``tpr_at_fpr`` maps each FPR asked to
  its TPR; ``fpr`` / ``tpr`` are the ROC curve. ``ledger_epsilon`` is the ε
  the training run's ledger states at ``delta`` (None if not given), and
  ``one_run`` the rigorous bound of a canary audit (None for an attack on
  examples that were not randomized into training).
  """
  attack: str
  num_members: int
  num_nonmembers: int
  auc: float
  advantage: float
  tpr_at_fpr: Dict[float, float]
  epsilon_lower_bound: float
  delta: float
  alpha: float
  fpr: np.ndarray = dataclasses.field(repr=False)
  tpr: np.ndarray = dataclasses.field(repr=False)
  ledger_epsilon: Optional[float] = None
  one_run: Optional[one_run_lib.OneRunAudit] = None

  @property
  def contradicts_ledger(self) -> bool:
    """Whether the one-run bound exceeds the ledger's ε: with the report's
    confidence, the run is less private than its ledger states (a bug in
    the mechanism, its accounting, or the audit's set-up)."""
    return (self.one_run is not None and self.ledger_epsilon is not None
            and self.one_run.epsilon_lower_bound > self.ledger_epsilon)

  def __str__(self) -> str:
    rates = ", ".join(f"TPR {tpr:.4f} at FPR {fpr:g}"
                      for fpr, tpr in self.tpr_at_fpr.items())
    text = (f"{self.attack}: {self.num_members} members, "
            f"{self.num_nonmembers} non-members; AUC {self.auc:.4f}, "
            f"advantage {self.advantage:.4f}; {rates}; ε >= "
            f"{self.epsilon_lower_bound:.3f} at δ={self.delta:g} "
            f"({1 - self.alpha:.0%} confidence)")
    if self.one_run is not None:
      text += f"; {self.one_run}"
    if self.ledger_epsilon is not None:
      text += f"; ledger ε = {self.ledger_epsilon:.3f}"
      if self.contradicts_ledger:
        text += (" (BELOW the one-run bound: the run leaks more than its "
                 "ledger states)")
    return text


def membership_inference_report(
    member_scores: Any, nonmember_scores: Any, *, delta: float,
    attack: str = "attack", fprs: Optional[Sequence[float]] = None,
    alpha: float = 0.05, seed: int = 0,
    ledger_epsilon: Optional[float] = None) -> MembershipInferenceReport:
  """Every metric of one attack's scores (higher score: "member").

  Args:
    member_scores: one score per training example of the model attacked.
    nonmember_scores: one score per example drawn from the same
      distribution but not trained on.
    delta: the δ of the ε lower bound (the δ of the training run).
    attack: the attack's name, printed in the report and the plot.
    fprs: the FPRs to read TPR at. None: those of ``DEFAULT_FPRS`` that the
      number of non-members resolves; a named FPR it cannot resolve is an
      error.
    alpha: 1 − the confidence of the ε lower bound.
    seed: the split of ``empirical_epsilon_lower_bound``.
    ledger_epsilon: the ε the training run's ledger states at ``delta``,
      reported (and plotted) beside the bounds.
  """
  members = check_scores("member_scores", member_scores, min_size=2)
  nonmembers = check_scores("nonmember_scores", nonmember_scores, min_size=2)
  if fprs is None:
    fprs = [f for f in DEFAULT_FPRS if nonmembers.size * f >= 1]
  fpr, tpr, _ = roc_curve(members, nonmembers)
  rates = {float(f): tpr_at_fpr(members, nonmembers, f) for f in fprs}
  epsilon, _ = empirical_epsilon_lower_bound(members, nonmembers, delta,
                                             alpha, seed)
  if ledger_epsilon is not None:
    ledger_epsilon = checks.check_epsilon("ledger_epsilon", ledger_epsilon)
  return MembershipInferenceReport(
      attack=attack, num_members=members.size, num_nonmembers=nonmembers.size,
      auc=float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2)),
      advantage=float(np.max(tpr - fpr)), tpr_at_fpr=rates,
      epsilon_lower_bound=epsilon, delta=float(delta), alpha=float(alpha),
      fpr=fpr, tpr=tpr, ledger_epsilon=ledger_epsilon)


def one_run_audit_report(
    scores: Any, included: Any, *, delta: float,
    ledger_epsilon: Optional[float] = None, attack: str = "one-run audit",
    alpha: float = 0.05,
    guesses: Optional[Sequence[Tuple[int, int]]] = None,
    fprs: Optional[Sequence[float]] = None,
    seed: int = 0) -> MembershipInferenceReport:
  """A membership-inference report of canaries, with the one-run bound.

  The included canaries are the members, the others the non-members; the
  report's ``one_run`` is ``tf_dp.analysis.one_run_audit(scores, included,
  ...)`` (Steinke, Nasr & Jagielski 2023) and its
  ``ledger_epsilon`` the ε it is to be compared with (see
  ``MembershipInferenceReport.contradicts_ledger``).

  Args:
    scores: one score per canary, higher meaning "more likely included".
    included: the canaries' inclusion bits (bool).
    delta: the run's δ.
    ledger_epsilon: the ε the run's ledger states at ``delta``.
    attack: the name the report and its plot print.
    alpha: 1 − the confidence of both bounds.
    guesses: as in ``tf_dp.analysis.one_run_audit``.
    fprs: as in ``membership_inference_report``.
    seed: as in ``membership_inference_report``.

  Raises:
    ValueError: bad scores or bits, fewer than 2 canaries on a side, or
      ``2 m δ > 1``.
  """
  scores, included = one_run_lib.check_canary_scores(scores, included)
  for side, count in (("included", int(included.sum())),
                      ("excluded", int((~included).sum()))):
    if count < 2:
      raise ValueError(f"A report needs at least 2 {side} canaries; got "
                       f"{count} of {included.size}. Use more canaries.")
  bound = one_run_lib.one_run_audit(scores, included, delta=delta,
                                    alpha=alpha, guesses=guesses)
  report = membership_inference_report(
      scores[included], scores[~included], delta=delta, attack=attack,
      fprs=fprs, alpha=alpha, seed=seed, ledger_epsilon=ledger_epsilon)
  return dataclasses.replace(report, one_run=bound)


def plot_roc(reports: Any, ax: Any = None) -> Any:
  """The ROC curves of one report or a list of them, on log-log axes.

  A report with a ``ledger_epsilon`` adds the line ``TPR = e^ε FPR + δ``
  of that ε (dashed): no test on an (ε, δ)-DP run has its ROC above it. A
  report with a ``one_run`` bound adds that ε's line (dash-dotted): the
  audit showed the run is at least that leaky. Returns the matplotlib
  figure (drawn on ``ax`` if given). Needs matplotlib
  (``pip install tf_dp[plots]``).
  """
  try:
    from matplotlib import pyplot  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise ImportError("plot_roc needs matplotlib: pip install matplotlib "
                      "(or tf_dp[plots]).") from None
  if isinstance(reports, MembershipInferenceReport):
    reports = [reports]
  reports = list(reports)
  if not reports or not all(isinstance(r, MembershipInferenceReport)
                            for r in reports):
    raise ValueError("reports must be a MembershipInferenceReport or a "
                     f"non-empty list of them; got {reports!r}.")
  if ax is None:
    figure, ax = pyplot.subplots(figsize=(5, 5))
  else:
    figure = ax.figure
  floor = 0.5 / max(r.num_nonmembers for r in reports)
  for report in reports:
    ax.plot(np.maximum(report.fpr, floor), np.maximum(report.tpr, floor),
            label=f"{report.attack} (AUC {report.auc:.3f})")
  ax.plot([floor, 1], [floor, 1], "k:", label="chance")
  _plot_epsilon_lines(ax, reports, floor)
  ax.set_xscale("log")
  ax.set_yscale("log")
  ax.set_xlim(floor, 1)
  ax.set_ylim(floor, 1)
  ax.set_xlabel("false positive rate")
  ax.set_ylabel("true positive rate")
  ax.legend(loc="lower right")
  return figure


def _plot_epsilon_lines(ax, reports, floor):
  """The lines ``TPR = min(1, e^ε FPR + δ)`` of the reports' ledger ε
  (dashed) and one-run bounds (dash-dotted), each (ε, δ) once."""
  fpr = np.geomspace(floor, 1.0, 200)
  drawn = set()
  for report in reports:
    lines = []
    if report.ledger_epsilon is not None:
      lines.append((report.ledger_epsilon, "--",
                    f"ledger ε = {report.ledger_epsilon:.2f}"))
    if report.one_run is not None:
      bound = report.one_run.epsilon_lower_bound
      lines.append((bound, "-.", f"one run: ε >= {bound:.2f}"))
    for epsilon, style, label in lines:
      if (label, report.delta) in drawn:
        continue
      drawn.add((label, report.delta))
      ax.plot(fpr, np.minimum(1.0, math.exp(epsilon) * fpr + report.delta),
              color="gray", linestyle=style, label=label)
