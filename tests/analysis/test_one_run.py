"""The one-run bound (Steinke, Nasr & Jagielski 2023) against closed forms
and against simulations of the guessing game with a known ε: randomized
response (exactly ε-DP) and a Gaussian mechanism per canary (exactly μ-GDP,
whose ε at each δ is known in closed form)."""

import math

import numpy as np
import pytest
from scipy import special
from scipy import stats

from tf_dp.analysis import one_run as ora
from tf_dp.analysis import pld_gaussian

pytestmark = pytest.mark.stack_independent


def p_value_by_the_formula(m, r, v, eps, delta):
  """Eq. (1) term by term, with scipy's binomial cdf (no shared code)."""
  q = math.exp(eps) / (1 + math.exp(eps))
  tail = stats.binom.sf(v - 1, r, q)
  windows = [(stats.binom.cdf(v - 1, r, q) - stats.binom.cdf(v - i - 1, r, q))
             / i for i in range(1, v + 1)]
  return min(1.0, tail + 2 * m * delta * max(windows, default=0.0))


@pytest.mark.parametrize("m,r,v,eps,delta", [
    (1000, 600, 420, 0.5, 1e-5), (100, 100, 90, 2.0, 1e-3),
    (50, 20, 20, 4.0, 1e-2), (10, 10, 1, 0.0, 0.05), (1000, 300, 0, 1.0, 1e-5)])
def test_p_value_is_equation_1(m, r, v, eps, delta):
  assert ora.one_run_p_value(m, r, v, eps, delta) == pytest.approx(
      p_value_by_the_formula(m, r, v, eps, delta), rel=1e-9, abs=1e-15)


def test_pure_dp_p_value_is_the_randomized_response_tail():
  # δ = 0: the ε-DP theorem alone, P[Binomial(r, e^ε / (1 + e^ε)) >= v].
  assert ora.one_run_p_value(500, 200, 150, 1.2, 0.0) == pytest.approx(
      stats.binom.sf(149, 200, special.expit(1.2)), rel=1e-12)


@pytest.mark.parametrize("r", [10, 100, 600])
def test_all_guesses_correct_gives_the_closed_form(r):
  # v = r and δ = 0: q^r <= alpha, so ε = logit(alpha^(1/r)).
  q = 0.05 ** (1 / r)
  assert ora.one_run_epsilon_lower_bound(1000, r, r, 0.0) == pytest.approx(
      math.log(q / (1 - q)), abs=2e-6)
  # δ = 1e-5 can only lower it, and only a little (the δ term is tiny).
  with_delta = ora.one_run_epsilon_lower_bound(1000, r, r, 1e-5)
  assert math.log(q / (1 - q)) - 0.1 < with_delta <= math.log(q / (1 - q))


def test_chance_level_guesses_refute_nothing():
  # v <= r / 2: even ε = 0 gives P[Binomial(r, 1/2) >= v] >= 1/2.
  for v in (0, 10, 50):
    assert ora.one_run_epsilon_lower_bound(1000, 100, v, 1e-5) == 0.0


def test_the_bound_lies_on_the_boundary_of_refutation():
  m, r, v, delta = 1000, 400, 300, 1e-5
  eps = ora.one_run_epsilon_lower_bound(m, r, v, delta)
  assert ora.one_run_p_value(m, r, v, eps, delta) <= 0.05
  assert ora.one_run_p_value(m, r, v, eps + 1e-4, delta) > 0.05


@pytest.mark.parametrize("m,delta", [(1000, 1e-5), (5000, 1e-4),
                                     (50000, 1e-5)])  # 2 m δ = 1: the edge.
def test_p_value_is_monotone_where_the_search_relies_on_it(m, delta):
  r = 200
  eps_grid = np.linspace(0, 6, 61)
  for v in (100, 130, 160, 190, 200):
    values = [ora.one_run_p_value(m, r, v, e, delta) for e in eps_grid]
    assert np.all(np.diff(values) >= -1e-12)
  for eps in (0.0, 1.0, 3.0):
    values = [ora.one_run_p_value(m, r, v, eps, delta) for v in range(r + 1)]
    assert np.all(np.diff(values) <= 1e-12)


def test_guesses_take_the_extremes():
  scores = [0.3, 2.0, -1.0, 0.5, -3.0, 0.5]
  np.testing.assert_array_equal(ora.guesses_from_scores(scores, 2, 1),
                                [0, 1, 0, 1, -1, 0])  # tie 0.5: first wins.
  np.testing.assert_array_equal(ora.guesses_from_scores(scores, 0, 0),
                                np.zeros(6))


def test_default_choices_are_fixed_fractions_of_the_canaries():
  assert ora.default_guess_choices(1000) == (
      (50, 0), (100, 0), (250, 0), (500, 0), (25, 25), (50, 50), (125, 125),
      (250, 250), (500, 500))
  assert ora.default_guess_choices(3) == ((1, 0), (2, 0), (1, 1))


def randomized_response_bounds(eps, m, runs, delta, seed):
  """The guessing game against ε-randomized response, ``runs`` times: each
  canary's output is its bit with probability e^ε / (1 + e^ε), else the
  other; the auditor guesses every canary's output. (Runs with the same
  number of correct guesses share their bound.)"""
  rng = np.random.default_rng(seed)
  bound_of = {}
  bounds = []
  for _ in range(runs):
    truth = rng.integers(0, 2, m) * 2 - 1
    output = np.where(rng.random(m) < special.expit(eps), truth, -truth)
    correct = int(np.sum(output == truth))
    if correct not in bound_of:
      bound_of[correct] = ora.one_run_epsilon_lower_bound(m, m, correct,
                                                          delta)
    bounds.append(bound_of[correct])
  return np.array(bounds)


@pytest.mark.parametrize("delta", [0.0, 1e-5])
def test_randomized_response_bound_holds_with_the_stated_confidence(delta):
  # ε-randomized response is exactly ε-DP: the bound may exceed ε in at
  # most 5% of runs. Measured: 4.45% of 2000 runs for δ = 0 and for
  # δ = 1e-5 (below 5%: the binomial is discrete). 6.6% is 3.3 standard
  # errors (0.49%) above 5%.
  bounds = randomized_response_bounds(1.0, 1000, 2000, delta, seed=1)
  assert np.mean(bounds > 1.0) < 0.066
  # Not vacuous: with 1000 canaries it finds most of ε (mean 0.88).
  assert 0.7 < np.mean(bounds) < 1.0


def test_randomized_response_bound_approaches_epsilon_as_m_grows():
  # The paper's point: many canaries in one run resolve ε. Measured means
  # 0.66, 0.89, 0.96, 0.99 at m = 100, 10^3, 10^4, 10^5 (20 runs each).
  means = [np.mean(randomized_response_bounds(1.0, m, 20, 0.0, seed=m))
           for m in (100, 1000, 10000, 100000)]
  assert np.all(np.diff(means) > 0)
  assert 0.96 < means[-1] < 1.0


def gaussian_game(mu, m, delta, seed):
  """One run of the game against m independent Gaussian mechanisms (canary
  i's score is N(mu, 1) if included, N(0, 1) if not: mu-GDP for each
  canary), scored with the default guess choices."""
  rng = np.random.default_rng(seed)
  included = rng.integers(0, 2, m).astype(bool)
  scores = rng.normal(size=m) + mu * included
  return ora.one_run_audit(scores, included, delta=delta)


def test_gaussian_mechanism_bound_is_below_its_epsilon_and_grows_with_m():
  mu, delta = 2.0, 1e-5
  true_eps = pld_gaussian.gaussian_dp_epsilon(delta, mu)  # 10.0
  means = []
  for m in (100, 1000, 10000):
    bounds = [gaussian_game(mu, m, delta, seed).epsilon_lower_bound
              for seed in range(10)]
    assert max(bounds) < true_eps
    means.append(np.mean(bounds))
  # Measured means 1.84, 2.96, 3.68 (largest 3.80): growing with m, but
  # far below 10.0: (1) bounds the worst (ε, δ)-DP mechanism, which
  # randomized response is and a Gaussian is not (a Gaussian's guesses are
  # rarely all right even at a large ε).
  assert np.all(np.diff(means) > 0.3)


def test_audit_reports_its_best_choice():
  audit = gaussian_game(3.0, 1000, 1e-5, seed=0)
  assert (audit.k_plus, audit.k_minus) in ora.default_guess_choices(1000)
  assert audit.num_guesses == audit.k_plus + audit.k_minus
  assert audit.num_choices == 9
  # The bound of that choice, recomputed at alpha / 9.
  assert audit.epsilon_lower_bound == pytest.approx(
      ora.one_run_epsilon_lower_bound(1000, audit.num_guesses,
                                      audit.num_correct, 1e-5, 0.05 / 9))
  assert "one run (Steinke et al. 2023): ε >= " in str(audit)


@pytest.mark.parametrize("call,match", [
    (lambda: ora.one_run_p_value(100, 10, 11, 1.0, 1e-5),
     "num_correct <= num_guesses <= num_canaries"),
    (lambda: ora.one_run_p_value(100, 10, 5, -1.0, 1e-5), "epsilon must be"),
    (lambda: ora.one_run_epsilon_lower_bound(100000, 10, 5, 1e-4),
     r"2 \* num_canaries \* delta = 20 > 1.*at most 5000 canaries"),
    (lambda: ora.one_run_epsilon_lower_bound(100, 10, 5, 1e-5, alpha=1.0),
     "alpha must"),
    (lambda: ora.one_run_audit([1.0, 2.0], [1, 0], delta=1e-5),
     "included must be booleans"),
    (lambda: ora.one_run_audit([1.0, np.nan], [True, False], delta=1e-5),
     "NaN or infinite score.*canary 1"),
    (lambda: ora.one_run_audit([1.0, 2.0], [True], delta=1e-5),
     "one entry per canary"),
    (lambda: ora.guesses_from_scores([1.0, 2.0], 2, 1), "at most the number"),
])
def test_bad_input_is_refused_naming_the_argument(call, match):
  with pytest.raises(ValueError, match=match):
    call()
