"""Privacy auditing with one training run (Steinke, Nasr & Jagielski 2023).

The game (the paper's Algorithm 1): ``m`` canaries, each included in the
training data independently with probability 1/2 (``S_i = +1`` in,
``-1`` out); one training run; a score per canary from the trained model
(higher: "more likely in"); the auditor guesses ``T_i = +1`` for the
``k+`` highest scores, ``-1`` for the ``k-`` lowest and abstains on the
rest. Of its ``r = k+ + k-`` guesses, ``W`` are correct.

If the training run is (ε, δ)-DP with respect to adding or removing one
canary, the paper's main theorem bounds the tail of ``W`` by that of
randomized response. With ``q = e^ε / (1 + e^ε)`` and ``B ~ Binomial(r,
q)``, for every integer ``v`` (the theorem for ε-DP is the first term
alone; the second is its (ε, δ) extension, arXiv:2305.08846)::

  P[W >= v] <= P[B >= v] + 2 m δ max_{1<=i<=v} P[v - i <= B < v] / i.  (1)

``one_run_p_value`` evaluates the right side of (1) at the observed count
``v``; ``one_run_epsilon_lower_bound`` returns the largest ε whose
p-value is at most ``alpha``: with probability at least ``1 − alpha``
the run is not (ε', δ)-DP for any ε' below it.

Why that search is sound here (our own step; the paper searches the same
way): when ``2 m δ <= 1`` the right side of (1) is nondecreasing in ε and
nonincreasing in ``v`` (each term ``P[B >= v] + 2 m δ g_i`` has
ε-derivative at least ``(1 − 2 m δ / i) dP[B >= v]/dq >= 0``, and the
maximum of the windows ``g_i`` grows by at most ``P[B = v]`` from ``v``
to ``v + 1`` while ``P[B >= v]`` falls by exactly that), so "p-value at
most alpha" is the event ``W >= v_0`` of a fixed ``v_0``, of probability
at most alpha under any (ε, δ)-DP run. A larger ``2 m δ`` is refused.

Choosing ``k+`` and ``k-`` after looking at the scores and the answers
would void the confidence; ``one_run_audit`` tries a fixed list of
choices and divides alpha among them (Bonferroni).
``tf_dp.analysis.membership_inference.one_run_audit_report`` puts the bound
in a membership-inference report beside the ledger's ε. Pure numpy and
scipy.
"""

import dataclasses
import math
from typing import Any, Optional, Sequence, Tuple

import numpy as np
from scipy import optimize
from scipy import special
from scipy import stats

from tf_dp.analysis import checks

# Fractions of the canaries guessed by the default choices of
# ``one_run_audit``: the top fraction only ("in" guesses), and as many
# "in" guesses on top as "out" guesses at the bottom.
TOP_FRACTIONS = (0.05, 0.1, 0.25, 0.5)
TWO_SIDED_FRACTIONS = (0.05, 0.1, 0.25, 0.5, 1.0)

# The search for the crossing stops within this of it (in ε).
_EPSILON_TOLERANCE = 1e-6


def _check_counts(num_canaries, num_guesses, num_correct):
  m = checks.check_positive_int("num_canaries", num_canaries)
  r = checks.check_steps("num_guesses", num_guesses)
  v = checks.check_steps("num_correct", num_correct)
  if not v <= r <= m:
    raise ValueError(
        f"The counts must satisfy num_correct <= num_guesses <= "
        f"num_canaries; got num_correct={v}, num_guesses={r}, "
        f"num_canaries={m}.")
  return m, r, v


def _check_delta(delta, num_canaries):
  delta = checks.check_delta("delta", delta, allow_zero=True)
  if 2 * num_canaries * delta > 1:
    raise ValueError(
        f"delta={delta:g} is too large for num_canaries={num_canaries}: "
        f"2 * num_canaries * delta = {2 * num_canaries * delta:g} > 1, and "
        f"the one-run bound is then not monotone in epsilon, so no lower "
        f"bound can be read from it. Audit with at most "
        f"{math.floor(1 / (2 * delta))} canaries, or a delta of at most "
        f"{1 / (2 * num_canaries):.3g}.")
  return delta


def one_run_p_value(num_canaries: int, num_guesses: int, num_correct: int,
                    epsilon: float, delta: float) -> float:
  """The right side of (1): how likely ``num_correct`` or more correct
  guesses are if the run is (``epsilon``, ``delta``)-DP.

  Args:
    num_canaries: m, the canaries whose inclusion was randomized.
    num_guesses: r, the guesses made (not abstained).
    num_correct: v, the correct guesses among them.
    epsilon: the ε of the null hypothesis.
    delta: the δ of the null hypothesis (``2 m δ <= 1``).

  Returns:
    A probability in [0, 1].
  """
  m, r, v = _check_counts(num_canaries, num_guesses, num_correct)
  delta = _check_delta(delta, m)
  epsilon = checks.check_epsilon("epsilon", epsilon)
  q = float(special.expit(epsilon))  # Accuracy of ε-randomized response.
  tail = float(stats.binom.sf(v - 1, r, q))
  if delta == 0 or v == 0:
    return min(tail, 1.0)
  # windows[i - 1] = P[v - i <= B <= v - 1], i = 1..v.
  windows = np.cumsum(stats.binom.pmf(np.arange(v - 1, -1, -1), r, q))
  steepest = float(np.max(windows / np.arange(1, v + 1)))
  return min(tail + 2 * m * delta * steepest, 1.0)


def one_run_epsilon_lower_bound(num_canaries: int, num_guesses: int,
                                num_correct: int, delta: float,
                                alpha: float = 0.05) -> float:
  """The largest ε that ``num_correct`` of ``num_guesses`` refutes.

  With probability at least ``1 − alpha`` (over the canaries' inclusion
  and the run's randomness), a run that is (ε, ``delta``)-DP for adding or
  removing one canary makes fewer correct guesses than that; so the run is
  not (ε', ``delta``)-DP for any ε' below the returned bound. 0 when even
  ε = 0 is not refuted.

  Args:
    num_canaries: m.
    num_guesses: r.
    num_correct: v.
    delta: δ, with ``2 m δ <= 1``.
    alpha: 1 − the confidence.
  """
  m, r, v = _check_counts(num_canaries, num_guesses, num_correct)
  delta = _check_delta(delta, m)
  alpha = checks.check_real("alpha", alpha, 0.0, 1.0, low_open=True,
                            high_open=True)
  excess = lambda eps: one_run_p_value(m, r, v, eps, delta) - alpha
  if excess(0.0) > 0:
    return 0.0
  low, high = 0.0, 1.0
  while excess(high) <= 0:
    low, high = high, 2 * high
    if high > 1e4:  # q rounds to 1 long before: nothing is refuted there.
      return low
  # The p-value is continuous and nondecreasing in ε: one crossing.
  crossing = optimize.brentq(excess, low, high, xtol=_EPSILON_TOLERANCE)
  # The largest ε refuted: step below the crossing within the tolerance.
  while excess(crossing) > 0 and crossing > low:
    crossing = max(low, crossing - _EPSILON_TOLERANCE)
  return float(crossing)


def guesses_from_scores(scores: Any, k_plus: int, k_minus: int) -> np.ndarray:
  """The paper's guesses: +1 for the ``k_plus`` highest scores, −1 for the
  ``k_minus`` lowest, 0 (abstain) elsewhere; ties broken by position (which
  says nothing of the inclusion bits).

  Returns:
    An int8 array, one guess per score.
  """
  scores = np.asarray(scores, dtype=np.float64)
  m = scores.size
  k_plus = checks.check_steps("k_plus", k_plus)
  k_minus = checks.check_steps("k_minus", k_minus)
  if k_plus + k_minus > m:
    raise ValueError(f"k_plus + k_minus must be at most the number of "
                     f"scores ({m}); got {k_plus} + {k_minus}.")
  order = np.argsort(-scores, kind="stable")
  guesses = np.zeros(m, np.int8)
  guesses[order[:k_plus]] = 1
  if k_minus:
    guesses[order[m - k_minus:]] = -1
  return guesses


def default_guess_choices(num_canaries: int) -> Tuple[Tuple[int, int], ...]:
  """The ``(k_plus, k_minus)`` pairs ``one_run_audit`` tries by default:
  ``TOP_FRACTIONS`` of the canaries guessed "in" at the top, and
  ``TWO_SIDED_FRACTIONS`` guessed half "in" at the top, half "out" at the
  bottom (without repeats; at least one guess each)."""
  m = checks.check_positive_int("num_canaries", num_canaries)
  choices = [(max(1, round(f * m)), 0) for f in TOP_FRACTIONS]
  for f in TWO_SIDED_FRACTIONS:
    half = min(max(1, round(f * m / 2)), m // 2)
    if half:
      choices.append((half, half))
  return tuple(dict.fromkeys(choices))


@dataclasses.dataclass(frozen=True)
class OneRunAudit:
  """The result of one one-run audit (see the module's doc).

  ``epsilon_lower_bound`` holds with confidence ``1 − alpha`` for the
  add/remove-one-canary neighbours, whatever the scores; it comes from the
  best of ``num_choices`` guess choices, alpha divided among them.
  """
  epsilon_lower_bound: float
  num_canaries: int
  num_guesses: int
  num_correct: int
  k_plus: int
  k_minus: int
  delta: float
  alpha: float
  num_choices: int

  def __str__(self) -> str:
    return (f"one run (Steinke et al. 2023): ε >= "
            f"{self.epsilon_lower_bound:.3f} at δ={self.delta:g} "
            f"({1 - self.alpha:.0%} confidence), {self.num_correct} of "
            f"{self.num_guesses} guesses correct on {self.num_canaries} "
            f"canaries")


def check_canary_scores(scores: Any, included: Any
                        ) -> Tuple[np.ndarray, np.ndarray]:
  """``(scores, included)`` as float64 and bool arrays of one entry per
  canary, the scores finite."""
  scores = np.asarray(scores, dtype=np.float64)
  included_array = np.asarray(included)
  if scores.ndim != 1 or included_array.shape != scores.shape:
    raise ValueError(f"scores and included must be 1-d arrays of one entry "
                     f"per canary; got shapes {scores.shape} and "
                     f"{included_array.shape}.")
  if included_array.dtype != np.bool_:
    raise ValueError(f"included must be booleans (the canaries' inclusion "
                     f"bits); got dtype {included_array.dtype}.")
  if not np.all(np.isfinite(scores)):
    bad = int(np.flatnonzero(~np.isfinite(scores))[0])
    raise ValueError(f"scores holds a NaN or infinite score (first at "
                     f"canary {bad}: {scores[bad]}). Fix the model that "
                     f"produced it.")
  return scores, included_array


def one_run_audit(scores: Any, included: Any, *, delta: float,
                  alpha: float = 0.05,
                  guesses: Optional[Sequence[Tuple[int, int]]] = None
                  ) -> OneRunAudit:
  """The one-run ε lower bound of canaries' scores and inclusion bits.

  Args:
    scores: one score per canary, higher meaning "more likely included".
    included: the canaries' inclusion bits (bool), drawn before training
      independently with probability 1/2 and kept from the scorer.
    delta: the δ of the bound (the run's δ; ``2 m δ <= 1``).
    alpha: 1 − the confidence.
    guesses: the ``(k_plus, k_minus)`` choices to try, fixed before the
      scores are seen; None: ``default_guess_choices(m)``. alpha is divided
      among them.

  Returns:
    A ``OneRunAudit`` of the choice with the largest bound.
  """
  scores, included = check_canary_scores(scores, included)
  m = scores.size
  delta = _check_delta(delta, m)
  choices = (default_guess_choices(m) if guesses is None
             else tuple((int(k[0]), int(k[1])) for k in guesses))
  if not choices:
    raise ValueError("guesses must name at least one (k_plus, k_minus).")
  share = checks.check_real("alpha", alpha, 0.0, 1.0, low_open=True,
                            high_open=True) / len(choices)
  truth = np.where(included, 1, -1)
  best = None
  for k_plus, k_minus in choices:
    made = guesses_from_scores(scores, k_plus, k_minus)
    correct = int(np.sum(made * truth > 0))
    bound = one_run_epsilon_lower_bound(m, k_plus + k_minus, correct, delta,
                                        share)
    if best is None or bound > best.epsilon_lower_bound:
      best = OneRunAudit(bound, m, k_plus + k_minus, correct, k_plus,
                         k_minus, float(delta), float(alpha), len(choices))
  assert best is not None
  return best

