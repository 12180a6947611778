r"""Privacy loss distribution (PLD) accounting of DP-SGD: the tightest epsilon.

The accountant composes the exact privacy loss distributions of the
subsampled Gaussian mechanism (Koskela, Jalko & Honkela 2020; Zhu, Dong &
Wang 2022) instead of bounding them by Renyi DP, which gives a markedly
smaller epsilon for the same run (e.g. sigma 1.3, q 256/60000, 702 steps,
delta 1e-5: 0.3752 instead of RDP's 0.5730; 0.377 on a 10x coarser grid).

How the number is computed, and why it is an upper bound:

* Each event is reduced to a *dominating pair* of one-dimensional Gaussian
  mixtures whose privacy profile delta(eps) is known in closed form
  (``pld_gaussian``): Poisson sampling with add/remove-one neighbours gives
  two pairs, one per ordering of the neighbours ("remove" and "add"), and
  fixed-size sampling without replacement with replace-one neighbours gives
  one symmetric pair (derivation in ``pld_gaussian``).
* Each profile is discretised *pessimistically* on a grid of spacing ``h``
  by connecting the dots (Doroshenko et al. 2022): the discrete PLD's
  profile lies on or above the true one everywhere, so the discrete pair
  dominates the mechanism (``pld_discrete``).
* Compositions are exact convolutions (FFT) of the discrete PLDs; ``count``
  identical events are composed by repeated squaring, distinct ones
  smallest-first; tails beyond ``tail_mass`` are only ever moved *up* in
  loss (the lower tail to the lowest kept point, the upper tail to +inf).
* Poisson events are composed separately for the two orderings ("remove"
  pairs for D' = D + x, "add" pairs for D' = D - x: a fixed pair of
  neighbours has the same ordering at every step) and the larger delta (or
  epsilon) is reported. Symmetric events enter both.
* delta(eps) and eps(delta) are read off the composed discrete PLD exactly.

So every reported epsilon is at least the true epsilon of the composed
mechanisms, up to floating-point rounding (see ``pld_discrete``). The grid
spacing only controls how much larger: with the default ``h = 1e-4`` the
results agree with ``dp_accounting``'s PLD accountant to better than 0.1% on
DP-SGD workloads (``tests/analysis/test_pld.py``).

Example:
  >>> acc = PLDAccountant()
  >>> acc.compose(GaussianEvent("poisson", 256 / 60000, 1.3), 702)
  >>> eps = acc.get_epsilon(1e-5)  # 0.3752
"""

import collections
import dataclasses
import math
from typing import Counter, Dict, List, Mapping, Optional, Tuple

from tf_dp.analysis import checks
from tf_dp.analysis import pld_discrete
from tf_dp.analysis import pld_gaussian
from tf_dp.sampling import ACCOUNTED
from tf_dp.sampling import Sampling


DEFAULT_VALUE_DISCRETIZATION_INTERVAL = 1e-4
DEFAULT_TAIL_MASS = 1e-15
# Above this many distinct events, ``coarsen_events`` merges them.
DEFAULT_MAX_DISTINCT_EVENTS = 256


@dataclasses.dataclass(frozen=True)
class GaussianEvent:
  """One step of a sampled Gaussian sum query (an immutable value).

  Attributes:
    sampling: ``"poisson"`` (each record kept with probability ``q``;
      add/remove-one neighbours, sensitivity C) or ``"fixed_size"`` (a
      uniform batch of ``q * n`` records drawn without replacement;
      replace-one neighbours, sensitivity 2C).
    sampling_probability: ``q`` in [0, 1].
    noise_multiplier: Noise stddev divided by the clip norm C; ``inf``
      means nothing was released, ``0`` means no noise (epsilon = inf).
  """
  sampling: Sampling
  sampling_probability: float
  noise_multiplier: float

  def __post_init__(self) -> None:
    object.__setattr__(self, "sampling", canonical_sampling(self.sampling))
    object.__setattr__(self, "sampling_probability", checks.
                       check_probability("sampling_probability",
                                         self.sampling_probability))
    object.__setattr__(self, "noise_multiplier", checks.
                       check_noise_multiplier("noise_multiplier",
                                              self.noise_multiplier,
                                              allow_zero=True))

  @property
  def is_noop(self) -> bool:
    return (self.sampling_probability == 0
            or math.isinf(self.noise_multiplier))

  @property
  def is_non_private(self) -> bool:
    return not self.is_noop and self.noise_multiplier == 0


class PLDAccountant:
  """Composes ``GaussianEvent``s and answers epsilon(delta) / delta(epsilon).

  Privacy contract: the reported epsilon (delta) is an upper bound on the
  epsilon (delta) of the adaptive composition of all composed events, each
  under its own neighbouring relation (see ``GaussianEvent``), computed by
  pessimistic PLD accounting (module docstring).

  Args:
    value_discretization_interval: Grid spacing ``h`` of the privacy
      losses. Smaller is tighter and slower (the answer stays an upper bound
      for any ``h``).
    tail_mass: Probability mass per truncation that may be moved up in loss
      to keep arrays short (it can add at most this much to delta per
      composition).
    max_distinct_events: With more distinct events than this, events are
      merged into pessimistic classes (``coarsen_events``) to bound the
      time; ``None`` composes every event exactly.

  Example:
    >>> acc = PLDAccountant().compose(GaussianEvent("poisson", 0.01, 1.1), 100)
    >>> eps = acc.get_epsilon(1e-5)
  """

  def __init__(
      self, value_discretization_interval: Optional[float] = None,
      tail_mass: Optional[float] = None,
      max_distinct_events: Optional[int] = DEFAULT_MAX_DISTINCT_EVENTS) -> None:
    h = (DEFAULT_VALUE_DISCRETIZATION_INTERVAL
         if value_discretization_interval is None
         else value_discretization_interval)
    self._h = checks.check_real("value_discretization_interval", h,
                                low=0.0, high=1.0, low_open=True)
    self._tail = checks.check_real(
        "tail_mass", DEFAULT_TAIL_MASS if tail_mass is None else tail_mass,
        low=0.0, high=1e-3, high_open=True)
    self._max_distinct = (None if max_distinct_events is None else
                          checks.check_positive_int(
                              "max_distinct_events", max_distinct_events,
                              " None composes every event exactly."))
    self._counts: Counter[GaussianEvent] = collections.Counter()
    self._non_private = False
    self._cache = None

  @property
  def value_discretization_interval(self) -> float:
    return self._h

  def compose(self, event: GaussianEvent, count: int = 1) -> "PLDAccountant":
    """Adds ``count`` repetitions of ``event``; returns ``self``."""
    if not isinstance(event, GaussianEvent):
      raise ValueError(f"event must be a GaussianEvent; got {event!r}.")
    count = checks.check_steps("count", count)
    if count == 0 or event.is_noop:
      return self
    if event.is_non_private:
      self._non_private = True
    else:
      self._counts[event] += count
    self._cache = None
    return self

  def _orderings(self):
    """The composed discrete PLD of each ordering of the neighbours.

    If the losses span too many grid points (tiny noise, huge epsilon),
    the grid is coarsened 4x until they fit: still an upper bound.
    """
    if self._cache is None:
      h = self._h
      while True:
        try:
          self._cache = self._compose_on_grid(h)
          break
        except pld_discrete.GridTooFine:
          h *= 4.0
    return self._cache

  def _compose_on_grid(self, h):
    tracks: Dict[str, List[Tuple[pld_discrete.DiscretePld, int]]] = {
        "remove": [], "add": []}
    counts = coarsen_events(self._counts, self._max_distinct)
    for event, count in counts.items():
      q, sigma = event.sampling_probability, event.noise_multiplier
      if event.sampling is Sampling.POISSON:
        for direction in tracks:
          tracks[direction].append((single_event_pld(
              direction, q, sigma, 1.0, h, self._tail), count))
      else:
        pld = single_event_pld("symmetric", q, sigma, 2.0, h, self._tail)
        for direction in tracks:
          tracks[direction].append((pld, count))
    if all(e.sampling is not Sampling.POISSON for e in counts):
      del tracks["add"]  # Symmetric events only: both orderings agree.
    return [pld_discrete.compose_all(plds, self._tail, h)
            for plds in tracks.values()]

  def _unsampled_mu(self) -> Optional[float]:
    """mu of the composition when every event has q = 1 (no sampling: each
    is a Gaussian mechanism of sensitivity 1 (add/remove) or 2 (replace
    one) over sigma, and their composition is exactly mu-GDP with the mu
    adding in squares); None otherwise."""
    if not self._counts or any(e.sampling_probability != 1
                               for e in self._counts):
      return None
    return math.sqrt(sum(
        count * ((1.0 if e.sampling == Sampling.POISSON else 2.0)
                 / e.noise_multiplier) ** 2
        for e, count in self._counts.items()))

  def get_delta(self, epsilon: float) -> float:
    """Smallest delta such that the composition is (epsilon, delta)-DP."""
    epsilon = checks.check_epsilon("epsilon", epsilon)
    if self._non_private:
      return 1.0
    mu = self._unsampled_mu()
    if mu is not None:
      return pld_gaussian.gaussian_dp_delta(epsilon, mu)
    return min(1.0, max(p.get_delta(epsilon) for p in self._orderings()))

  def get_epsilon(self, delta: float) -> float:
    """Smallest epsilon such that the composition is (epsilon, delta)-DP."""
    delta = checks.check_delta("delta", delta)
    if self._non_private:
      return math.inf
    mu = self._unsampled_mu()
    if mu is not None:
      return pld_gaussian.gaussian_dp_epsilon(delta, mu)
    return max(p.get_epsilon(delta) for p in self._orderings())


def coarsen_events(counts: Mapping[GaussianEvent, int],
                   max_distinct: Optional[int]) -> Mapping[GaussianEvent, int]:
  """Merges events into at most ~``max_distinct`` pessimistic classes.

  When there are more distinct events than ``max_distinct``, noise
  multipliers are rounded *down* and sampling probabilities *up* to a
  geometric grid (per sampling scheme) just fine enough to leave at most
  that many classes. This is pessimistic: a larger noise multiplier is a
  post-processing of a smaller one (add independent Gaussian noise), and
  the pairs of a smaller sampling probability are mixtures of the larger
  one's with the identity pair, dominated by joint convexity of the
  hockey-stick divergence. With 10^4 noise multipliers spread over
  [0.8, 3] and the default 256 classes the grid is 0.5% wide.
  """
  if not max_distinct or len(counts) <= max_distinct:
    return counts
  out: Counter[GaussianEvent] = collections.Counter()
  for sampling in ACCOUNTED:
    events = {e: c for e, c in counts.items() if e.sampling == sampling}
    if not events:
      continue
    q_min = min(e.sampling_probability for e in events)
    q_max = max(e.sampling_probability for e in events)
    s_min = min(e.noise_multiplier for e in events)
    s_max = max(e.noise_multiplier for e in events)
    span = math.log(s_max / s_min) + math.log(q_max / q_min)
    step = max(span / max_distinct, 1e-12)
    for e, c in events.items():
      sigma = s_min * math.exp(step * math.floor(
          math.log(e.noise_multiplier / s_min) / step))
      q = q_min * math.exp(step * math.ceil(
          math.log(e.sampling_probability / q_min) / step))
      out[GaussianEvent(sampling, min(q, 1.0, max(e.sampling_probability, q)),
                        min(sigma, e.noise_multiplier))] += c
  return out


def canonical_sampling(sampling: object) -> Sampling:
  """``sampling``, checked: ``"poisson"`` or ``"fixed_size"``.

  Raises:
    ValueError: naming ``sampling`` if it is neither.
  """
  return Sampling.check("sampling", sampling, ACCOUNTED)


def single_event_pld(direction: str, q: float, sigma: float, sens: float,
                     h: float, tail_mass: float) -> pld_discrete.DiscretePld:
  """Connect-the-dots discrete PLD of one subsampled Gaussian pair."""
  lo, hi = pld_gaussian.loss_range(direction, q, sigma, sens, tail_mass)
  return pld_discrete.DiscretePld.from_profile(
      pld_gaussian.privacy_profile(direction, q, sigma, sens), lo, hi, h)


def dp_sgd_pld_epsilon(
    sampling_probability: float, noise_multiplier: float, steps: int,
    delta: float, sampling: str = Sampling.POISSON,
    value_discretization_interval: Optional[float] = None) -> float:
  """Epsilon of ``steps`` identical DP-SGD steps by PLD accounting.

  Privacy contract: as ``PLDAccountant`` for ``steps`` repetitions of
  ``GaussianEvent(sampling, sampling_probability, noise_multiplier)``.
  """
  acc = PLDAccountant(value_discretization_interval)
  acc.compose(GaussianEvent(canonical_sampling(sampling),
                            sampling_probability, noise_multiplier), steps)
  return acc.get_epsilon(delta)
