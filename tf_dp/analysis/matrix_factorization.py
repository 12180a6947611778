r"""Correlated-noise strategies (matrix factorization mechanisms), offline.

Training with correlated noise releases the prefix sums ``A x`` of the
clipped gradient sums ``x_0 .. x_{n-1}`` (``A`` lower-triangular ones, the
*workload*) through a factorization ``A = B C``: the mechanism releases
``C x + z`` with ``z`` i.i.d. N(0, (sigma * clip)^2) and post-processes it
with ``B``, so the prefix sums carry the noise ``B z`` (Denisov et al. 2022;
Choquette-Choo et al. 2023, "Multi-Epoch Matrix Factorization Mechanisms
for Private Machine Learning", Sec. 2). Equivalently, step t's gradient sum
receives the noise ``w = C^+ z`` (``C^+`` a left inverse of ``C``:
``x + C^+ z = C^+ (C x + z)`` is post-processing of the Gaussian mechanism
``C x + z``), which is what ``tf_dp.dp_query.correlated_noise_query`` adds.

Two strategies:

* **banded Toeplitz** (Choquette-Choo et al. 2023, "(Amplified) Banded
  Matrix Factorization: A unified approach to private training"; McKenna
  2024, "Scaling up the Banded Matrix Factorization Mechanism"): ``C``
  lower-triangular Toeplitz with ``bands`` coefficients ``c_0 .. c_{b-1}``,
  optimised here for the expected total squared error
  ``||A C^{-1}||_F^2 * sens(C)^2``; ``bands=1`` is the identity, i.e.
  DP-SGD without amplification;
* **binary-tree aggregation** (Dwork et al. 2010, Chan et al. 2011; DP-FTRL
  of Kairouz et al. 2021, "Practical and Private (Deep) Learning without
  Sampling or Shuffling"), restarted every ``2^height`` steps: ``C`` has one
  row per tree node (its leaves' sum), ``B`` picks the dyadic nodes of each
  prefix.

Sensitivity (clip norm 1). Each example contributes a gradient ``g_t``
(``||g_t|| <= 1``) at the steps ``t`` of its *participation pattern* and
moves ``C x`` by ``sum_t C[:, t] g_t^T``, whose Frobenius norm squared is
``sum_{s,t} <C_s, C_t> <g_s, g_t>``.

* one participation: the largest column norm of ``C`` (exact, any ``C``);
* ``k`` participations at least ``s`` steps apart, when no row of ``C``
  has non-zeros in two columns ``s`` or more apart (a ``b``-banded ``C``
  with ``b <= s``; a tree restarted every ``2^h <= s`` steps): the cross
  terms vanish, so the sensitivity is ``sqrt(max_pattern sum_t ||C_t||^2)``
  (Choquette-Choo et al. 2023, "(Amplified) Banded MF", Thm. 2's
  b-min-separation case), computed exactly by dynamic programming over the
  patterns; for a Toeplitz ``C`` with ``||c|| = 1`` it is ``sqrt(k)`` when
  the k participations fit before the last ``b - 1`` columns;
* any other ``C`` with ``k > 1`` is refused (the cross terms would need the
  bounds of Choquette-Choo et al. 2023's Sec. 4, which this module does not
  implement).

A run stopped after t steps released only the rows of ``C`` whose noise
its steps drew (``released_matrix``: a row's noise is drawn at its last
non-zero column), and is accounted from their sensitivity
(``Strategy.released_sensitivity``); for a tree of T leaves this is
Kairouz et al. 2021's ``sqrt(ceil(log2(T + 1)))``.

Accounting: the release is one Gaussian mechanism of sensitivity ``sens``
and noise multiplier ``sigma`` (noise stddev / clip), hence
``mu = sens / sigma``-GDP (Dong, Roth & Su 2022) under the relation whose
per-example change is bounded by the clip (``"zero_out"``: one example's
gradients replaced by zeros, as in the papers above); under replace-one
neighbours the change is bounded by twice the clip, so ``mu`` doubles.
No sampling amplification is ever claimed.
"""

import dataclasses
import hashlib
import math
from typing import Optional, Tuple

import numpy as np
from scipy import optimize
from scipy import signal

from tf_dp.analysis import checks
from tf_dp.analysis import pld_gaussian
from tf_dp.errors import PrivacyError

BANDED_TOEPLITZ = "banded_toeplitz"
TREE = "tree"
KINDS = (BANDED_TOEPLITZ, TREE)

# Neighbouring relations: how many clips one example's change spans.
NEIGHBOURING = {"zero_out": 1.0, "replace_one": 2.0}


def prefix_sum_workload(n: int) -> np.ndarray:
  """``A``: the ``n x n`` lower-triangular matrix of ones (prefix sums)."""
  n = checks.check_positive_int("n", n)
  return np.tril(np.ones((n, n)))


def toeplitz_matrix(coefficients: np.ndarray, n: int) -> np.ndarray:
  """The ``n x n`` lower-triangular Toeplitz matrix whose j-th subdiagonal
  is ``coefficients[j]`` (zero beyond the last coefficient)."""
  n = checks.check_positive_int("n", n)
  c = np.asarray(coefficients, dtype=float)
  out = np.zeros((n, n))
  for j, value in enumerate(c[:n]):
    out += np.diag(np.full(n - j, value), -j)
  return out


def inverse_series(coefficients: np.ndarray, n: int) -> np.ndarray:
  """The first ``n`` coefficients of ``1 / c(x)``: the first column of the
  (Toeplitz) inverse of ``toeplitz_matrix(coefficients, n)``."""
  impulse = np.zeros(checks.check_positive_int("n", n))
  impulse[0] = 1.0
  return signal.lfilter([1.0], np.asarray(coefficients, dtype=float), impulse)


def _banded_error_per_unit_sensitivity(c, n):
  """``||A C^{-1}||_F^2 / ||c||^2``-normalised objective: A C^{-1} is
  Toeplitz with first column the prefix sums of ``1 / c(x)``."""
  e = np.cumsum(inverse_series(c, n))
  return float(np.dot(c, c) * np.dot(np.arange(n, 0, -1), e * e))


def sqrt_factorization_coefficients(count: int) -> np.ndarray:
  """``binom(2j, j) / 4^j``, j < count: the series of ``(1 - x)^{-1/2}``,
  whose Toeplitz matrix squared is ``A`` (Fichtenberger, Henzinger &
  Upadhyay 2023)."""
  count = checks.check_positive_int("count", count)
  j = np.arange(1, count)
  return np.concatenate([[1.0], np.cumprod((2 * j - 1) / (2 * j))])


def optimize_banded_toeplitz(n: int, bands: int,
                             max_iterations: int = 500) -> np.ndarray:
  """Toeplitz coefficients ``c_0 .. c_{bands-1}`` (``c_0 > 0``,
  ``||c|| = 1``) minimising the expected total squared error
  ``||A C^{-1}||_F^2 * ||c||^2`` of the prefix sums of ``n`` steps.

  ``||c||^2`` is the squared sensitivity of one participation, and ``k``
  times it for k participations at least ``bands`` steps apart, so the
  optimum is the same for every such participation scheme (McKenna 2024,
  Sec. 3, optimises this objective over Toeplitz strategies). Started from
  the truncated square-root factorization; L-BFGS on the scale-invariant
  objective.
  """
  n = checks.check_positive_int("n", n)
  bands = checks.check_positive_int("bands", bands)
  if bands > n:
    raise ValueError(f"bands must be at most n={n} (the steps the strategy "
                     f"is built for); got bands={bands}.")
  start = sqrt_factorization_coefficients(bands)
  if bands > 1:
    result = optimize.minimize(
        lambda c: math.log(_banded_error_per_unit_sensitivity(c, n)), start,
        method="L-BFGS-B", options={"maxiter": max_iterations})
    best = result.x
    if not (np.all(np.isfinite(best)) and abs(best[0]) > 0 and
            _banded_error_per_unit_sensitivity(best, n) <=
            _banded_error_per_unit_sensitivity(start, n)):
      best = start
  else:
    best = start
  best = best * np.sign(best[0])
  return best / np.linalg.norm(best)


def tree_matrices(n: int, height: int) -> Tuple[np.ndarray, np.ndarray]:
  """``(C, C_left_inverse)`` of binary-tree aggregation over ``n`` steps,
  restarted every ``2^height`` steps.

  ``C`` has one row per node of each tree (levels 0..height, a node the sum
  of its ``2^level`` leaves), ``n`` columns; ``C_left_inverse`` (``n`` rows)
  is ``A^{-1} B`` with ``B`` the dyadic decomposition of each prefix within
  its tree, so ``C_left_inverse @ C = I`` and the noise of step t is the
  difference of consecutive dyadic prefix noises (``B_full = A @
  C_left_inverse`` gives the prefix noises of the whole run: the roots of
  the finished trees plus the current tree's decomposition).
  """
  n = checks.check_positive_int("n", n)
  height = checks.check_steps("height", height)
  leaves = 2 ** height
  nodes = [(level, i) for level in range(height + 1)
           for i in range(leaves >> level)]
  index = {node: r for r, node in enumerate(nodes)}
  c_tree = np.zeros((len(nodes), leaves))
  for (level, i), r in index.items():
    c_tree[r, i << level:(i + 1) << level] = 1.0
  b_tree = np.zeros((leaves, len(nodes)))
  for t in range(1, leaves + 1):
    start = 0
    for level in range(height, -1, -1):
      if t & (1 << level):
        b_tree[t - 1, index[(level, start >> level)]] = 1.0
        start += 1 << level
  left_inverse_tree = np.diff(b_tree, axis=0, prepend=0.0)  # A^{-1} B
  trees = -(-n // leaves)
  c = np.kron(np.eye(trees), c_tree)[:, :n]
  left_inverse = np.kron(np.eye(trees), left_inverse_tree)[:n, :]
  return c, left_inverse


def column_norms(c: np.ndarray) -> np.ndarray:
  """The L2 norm of each column of ``c``."""
  return np.linalg.norm(np.asarray(c, dtype=float), axis=0)


def max_row_span(c: np.ndarray) -> int:
  """The largest ``j - i`` over rows with non-zeros in columns i and j:
  columns ``max_row_span + 1`` or more apart never share a row."""
  c = np.asarray(c)
  span = 0
  for row in c:
    nonzero = np.flatnonzero(row)
    if nonzero.size:
      span = max(span, int(nonzero[-1] - nonzero[0]))
  return span


def _best_pattern_sum(values, participations, min_separation):
  """Max over patterns of at most ``participations`` steps, consecutive
  ones at least ``min_separation`` apart, of the sum of ``values`` (>= 0)."""
  n = values.size
  best_with = values.copy()  # best sum of patterns whose last step is t
  overall = float(best_with.max())
  for _ in range(participations - 1):
    before = np.full(n, -np.inf)
    if min_separation < n:
      before[min_separation:] = np.maximum.accumulate(
          best_with)[:n - min_separation]
    best_with = values + before
    if not np.isfinite(best_with).any():
      break
    overall = max(overall, float(best_with.max()))
  return overall


def sensitivity(c: np.ndarray, participations: int = 1,
                min_separation: Optional[int] = None) -> float:
  """L2 sensitivity of ``c @ x`` (clip 1) for one example's participations.

  Args:
    c: The strategy matrix (rows: noised outputs, columns: steps).
    participations: The most steps at which one example contributes.
    min_separation: With ``participations > 1``, the fewest steps between
      two of one example's participations.

  Returns:
    One participation: the largest column norm (exact). Several: the exact
    maximum over patterns of ``sqrt(sum ||C_t||^2)`` (module docstring).

  Raises:
    PrivacyError: if ``participations > 1`` and a row of ``c`` has non-zeros
      in two columns ``min_separation`` or more apart (the cross terms are
      not bounded here).
  """
  c = np.asarray(c, dtype=float)
  return _sensitivity_of_columns(column_norms(c) ** 2, max_row_span(c),
                                 participations, min_separation)


def _sensitivity_of_columns(norms_sq, span, participations, min_separation):
  """``sensitivity`` from the squared column norms and the row span."""
  participations = checks.check_positive_int("participations",
                                             participations)
  if participations == 1:
    return float(math.sqrt(norms_sq.max()))
  if min_separation is None:
    raise ValueError("min_separation is required with participations > 1: "
                     "the fewest steps between two participations of one "
                     "example.")
  min_separation = checks.check_positive_int("min_separation", min_separation)
  if span >= min_separation:
    raise PrivacyError(
        f"The strategy's columns {span} steps apart share a row, but "
        f"participations may be only min_separation={min_separation} steps "
        f"apart: the sensitivity of this scheme is not bounded here. Use a "
        f"banded strategy with at most {min_separation} bands (or a tree "
        f"restarted at most every {min_separation} steps), or one "
        f"participation.")
  return float(math.sqrt(_best_pattern_sum(norms_sq, participations,
                                           min_separation)))


def released_matrix(strategy: "Strategy", steps_run: int) -> np.ndarray:
  """The rows of ``strategy.matrix()`` released by its first ``steps_run``
  steps, restricted to those steps' columns.

  A row's noise is drawn at the step of its last non-zero column (the
  query draws ``z_t`` at step t for a banded strategy, a tree node's noise
  when its last leaf arrives), so the first ``steps_run`` noised sums are
  post-processing of ``C' x' + z'`` with ``C'`` the rows whose non-zeros
  all lie in the first ``steps_run`` columns: the mechanism of a run
  stopped there. Explicit (``steps x steps`` at most); the accountant uses
  ``Strategy.released_sensitivity``, which computes the same column norms
  in closed form.
  """
  steps_run = checks.check_steps("steps_run", steps_run)
  if strategy.kind == BANDED_TOEPLITZ:
    c = strategy.matrix()
  else:  # Whole trees: a node's last leaf may lie beyond ``steps``.
    whole = -(-strategy.steps // strategy.bands) * strategy.bands
    c = tree_matrices(whole, strategy.height)[0]
  last = np.array([np.flatnonzero(row)[-1] if row.any() else -1
                   for row in c])
  return c[(last >= 0) & (last < steps_run)][:, :steps_run]


def _released_column_norms_sq(strategy, steps_run):
  """``column_norms(released_matrix(strategy, steps_run)) ** 2``."""
  j = np.arange(steps_run)
  if strategy.kind == BANDED_TOEPLITZ:
    # Column j holds c_0 .. c_{m-1}, m = min(bands, steps_run - j).
    energy = np.cumsum(np.asarray(strategy.coefficients) ** 2)
    return energy[np.minimum(strategy.bands, steps_run - j) - 1]
  # Leaf j is in one node per level; a node counts once its last leaf ran.
  position = j % strategy.bands
  start = j - position
  count = np.zeros(steps_run)
  for level in range(strategy.height + 1):
    end = start + (((position >> level) + 1) << level)
    count += end <= steps_run
  return count


def _released_row_span(strategy, steps_run):
  """``max_row_span(released_matrix(strategy, steps_run))``."""
  if strategy.kind == BANDED_TOEPLITZ:
    return min(strategy.bands, steps_run) - 1
  return 2 ** min(strategy.height, int(math.log2(steps_run))) - 1


def expected_total_squared_error(b: np.ndarray, sens: float) -> float:
  """``||B||_F^2 * sens^2``: the expected squared error summed over all
  prefix sums, at noise multiplier ``1 / sens`` per unit sensitivity."""
  return float(np.sum(np.asarray(b, dtype=float) ** 2) * sens * sens)


def gdp_mu(sens: float, noise_multiplier: float,
           neighbouring: str = "replace_one") -> float:
  """``mu`` of the release: (span of one example's change) / noise stddev.

  ``neighbouring="zero_out"``: one example's gradients replaced by zeros
  (span ``sens * clip``); ``"replace_one"``: by another example's
  (``2 * sens * clip``).
  """
  checks.check_choice("neighbouring", neighbouring, tuple(NEIGHBOURING))
  sens = checks.check_non_negative("sensitivity", sens)
  noise_multiplier = checks.check_non_negative("noise_multiplier",
                                               noise_multiplier)
  if noise_multiplier == 0:
    return math.inf if sens > 0 else 0.0
  return NEIGHBOURING[neighbouring] * sens / noise_multiplier


def epsilon_of_mu(mu: float, delta: float) -> float:
  """The exact (epsilon, delta) of mu-GDP (``pld_gaussian``)."""
  delta = checks.check_delta("delta", delta)
  if math.isinf(mu):
    return math.inf
  return 0.0 if mu == 0 else pld_gaussian.gaussian_dp_epsilon(delta, mu)


def noise_multiplier_for_epsilon(sens: float, target_epsilon: float,
                                 delta: float,
                                 neighbouring: str = "replace_one") -> float:
  """The smallest noise multiplier whose release is (target_epsilon,
  delta)-DP (to a relative 1e-9, rounded up)."""
  target_epsilon = checks.check_epsilon("target_epsilon", target_epsilon,
                                        allow_zero=False)
  unit = gdp_mu(sens, 1.0, neighbouring)
  lo, hi = 1e-6, 1.0
  while epsilon_of_mu(unit / hi, delta) > target_epsilon:
    lo, hi = hi, hi * 2.0
  while hi - lo > 1e-9 * hi:
    mid = 0.5 * (lo + hi)
    if epsilon_of_mu(unit / mid, delta) > target_epsilon:
      lo = mid
    else:
      hi = mid
  return hi


@dataclasses.dataclass(frozen=True)
class Strategy:
  """A stored correlated-noise strategy, built for ``steps`` steps.

  ``kind`` is ``"banded_toeplitz"`` (``coefficients`` c_0..c_{b-1}) or
  ``"tree"`` (``height``: restarts every ``2^height`` steps).
  """
  kind: str
  steps: int
  coefficients: Tuple[float, ...] = ()
  height: int = 0

  def __post_init__(self):
    checks.check_choice("kind", self.kind, KINDS)
    checks.check_positive_int("steps", self.steps)
    if self.kind == BANDED_TOEPLITZ:
      c = np.asarray(self.coefficients, dtype=float)
      if c.ndim != 1 or c.size == 0 or not np.all(np.isfinite(c)) or (
          c[0] <= 0):
        raise ValueError(f"coefficients must be a non-empty list of finite "
                         f"numbers with coefficients[0] > 0; got "
                         f"{self.coefficients!r}.")
      if c.size > self.steps:
        raise ValueError(f"A strategy of {c.size} bands needs steps >= "
                         f"{c.size}; got steps={self.steps}.")
    else:
      checks.check_steps("height", self.height)

  @property
  def bands(self) -> int:
    """Rows over which one column is spread: ``b``, or ``2^height``."""
    if self.kind == BANDED_TOEPLITZ:
      return len(self.coefficients)
    return 2 ** self.height

  def matrix(self) -> np.ndarray:
    """``C`` for ``steps`` steps."""
    if self.kind == BANDED_TOEPLITZ:
      return toeplitz_matrix(np.asarray(self.coefficients), self.steps)
    return tree_matrices(self.steps, self.height)[0]

  def noise_matrix(self) -> np.ndarray:
    """``C^+`` (steps x rows of C): the per-step noise is ``C^+ z``."""
    if self.kind == BANDED_TOEPLITZ:
      return np.linalg.inv(self.matrix())
    return tree_matrices(self.steps, self.height)[1]

  def sensitivity(self, participations: int = 1,
                  min_separation: Optional[int] = None) -> float:
    """``sensitivity(self.matrix(), participations, min_separation)``."""
    return sensitivity(self.matrix(), participations, min_separation)

  def released_sensitivity(self, steps_run: int, participations: int = 1,
                           min_separation: Optional[int] = None) -> float:
    """The sensitivity of what the first ``steps_run`` steps released
    (``sensitivity(released_matrix(self, steps_run), ...)``, from column
    norms in closed form): ``0`` for no step; ``sensitivity(...)`` of the
    whole strategy after all its steps, except that tree nodes whose leaves
    lie partly beyond ``steps`` are never released (the sensitivity of one
    participation in a tree of T leaves is then ``sqrt(ceil(log2(T + 1)))``,
    Kairouz et al. 2021).

    Raises:
      ValueError: if ``steps_run`` exceeds ``steps``.
      PrivacyError: as ``sensitivity``.
    """
    steps_run = checks.check_steps("steps_run", steps_run)
    if steps_run > self.steps:
      raise ValueError(f"steps_run={steps_run} exceeds the {self.steps} "
                       f"steps the strategy was built for.")
    if steps_run == 0:
      checks.check_positive_int("participations", participations)
      return 0.0
    return _sensitivity_of_columns(
        _released_column_norms_sq(self, steps_run),
        _released_row_span(self, steps_run), participations, min_separation)

  def fingerprint(self) -> str:
    """A short hash of the kind, steps and coefficients (or height)."""
    text = f"{self.kind}|{self.steps}|{self.height}|" + ",".join(
        float(c).hex() for c in self.coefficients)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def banded_strategy(steps: int, bands: int) -> Strategy:
  """The optimised banded Toeplitz strategy for ``steps`` steps."""
  c = optimize_banded_toeplitz(steps, bands)
  return Strategy(BANDED_TOEPLITZ, steps,
                  coefficients=tuple(float(x) for x in c))


def tree_strategy(steps: int, height: Optional[int] = None) -> Strategy:
  """Tree aggregation over ``steps`` steps, restarted every
  ``2^height`` steps (one tree, ``ceil(log2 steps)``, by default)."""
  steps = checks.check_positive_int("steps", steps)
  if height is None:
    height = max(0, math.ceil(math.log2(steps)))
  return Strategy(TREE, steps, height=checks.check_steps("height", height))
