"""The validated configuration of the DP step, shared by every front end.

``DPConfig`` says what the step does (clip, noise multiplier, lots,
sampling, what the ledger records); the Keras ``DPOptimizer`` and the
Estimator optimizers build one and validate their arguments through it.
"""

import dataclasses
import warnings
from typing import Any, Dict, Optional

import tensorflow as tf

from tf_dp.analysis import checks
from tf_dp.analysis import correlated_noise_accounting as accounting
from tf_dp.analysis import matrix_factorization as mf
from tf_dp.errors import PrivacyError
from tf_dp.core import caller_api
from tf_dp.errors import SamplingMismatchError
from tf_dp.privacy_ledger import PrivacyLedger
from tf_dp.privacy_ledger import QueryWithLedger
from tf_dp.sampling import PrivacyUnit
from tf_dp.sampling import Sampling

PER_EXAMPLE_METHODS = ("auto", "fast", "vectorized")



def population_size_required(
    caller: caller_api.CallerApi = caller_api.TF_DP) -> str:
  """Why n is needed and how ``caller``'s constructor is given it."""
  return (f"tf_dp needs the number of training examples to account privacy: "
          f"{caller.setting('population_size', 'len(x_train)')}. It is "
          f"inferred only when sampling='shuffled' and Keras `fit` receives "
          f"arrays or tensors of known length; a tf.data pipeline, a "
          f"generator, a custom training loop and the samplers of tf_dp.data "
          f"need it given.")


def _averages(query: Any) -> bool:
  """Whether ``query`` holds a ``NormalizedQuery`` (itself, in a
  ``QueryWithLedger`` or in a part of a ``NestedQuery``): its noised
  result is then an average, not a sum."""
  from tf_dp.dp_query.nested_query import NestedQuery  # pylint: disable=g-import-not-at-top
  from tf_dp.dp_query.normalized_query import NormalizedQuery  # pylint: disable=g-import-not-at-top
  if isinstance(query, NormalizedQuery):
    return True
  if isinstance(query, QueryWithLedger):
    return _averages(query.query)
  if isinstance(query, NestedQuery):
    return any(_averages(q) for q in tf.nest.flatten(query.queries))
  return False


@dataclasses.dataclass(frozen=True)
class DPConfig:
  """What DP-SGD does; see ``tf_dp.DPOptimizer`` for the arguments.

  Privacy contract: a configuration only describes the step (what is
  clipped, the noise, the lots, what the ledger records); it is validated
  here, and an invalid value raises, naming the argument and the fix,
  before any DP state exists. It is frozen: a changed configuration is a
  new one (``dataclasses.replace``, validated again), and what is learned
  at run time (an n inferred from ``fit``'s arrays) lives in the engine
  (``LotEngine.population_size``).
  """
  l2_norm_clip: Optional[float]
  noise_multiplier: Optional[float]
  num_microbatches: Optional[int] = None
  gradient_accumulation_steps: int = 1
  dp_query: Any = None
  ledger: Optional[PrivacyLedger] = None
  population_size: Optional[int] = None
  sampling: Sampling = Sampling.SHUFFLED
  sampling_probability: Optional[float] = None
  clipping: str = "flat"
  noise_allocation: str = "proportional"
  max_lots: int = 100000
  per_example_method: str = "auto"
  metrics_noise_stddev: Optional[float] = None
  secure_mode: bool = False
  noise_strategy: Any = None
  max_passes: int = 1
  privacy_unit: PrivacyUnit = PrivacyUnit.EXAMPLE
  max_examples_per_user: Optional[int] = None
  # The constructor the user called: what refusals name (not serialised).
  caller: caller_api.CallerApi = dataclasses.field(
      default=caller_api.TF_DP, compare=False)

  def __post_init__(self):
    from tf_dp.dp_query.dp_query import DPQuery  # pylint: disable=g-import-not-at-top
    query_argument = self.caller.argument("dp_query")
    if self.dp_query is not None and not isinstance(self.dp_query, DPQuery):
      raise TypeError(f"{query_argument} must be a tf_dp DPQuery (e.g. "
                      f"tf_dp.GaussianSumQuery or tf_dp.build_query(...)); got "
                      f"{self.dp_query!r}.")
    if self.dp_query is not None and _averages(self.dp_query):
      raise ValueError(
          f"{query_argument} must return the noised SUM of the lot's "
          "records: the DP step divides it by the lot's denominator itself, "
          "and a NormalizedQuery in it (tf_dp.build_query(..., denominator="
          "...), TF Privacy's GaussianAverageQuery) would divide it a second "
          "time. Pass the sum query (the NormalizedQuery's "
          "numerator_query, or build_query without denominator).")
    if not isinstance(self.secure_mode, bool):
      raise ValueError(f"secure_mode must be True or False; got "
                       f"{self.secure_mode!r}.")
    if self.dp_query is not None and self.secure_mode:
      raise PrivacyError("secure_mode=True with a custom dp_query: build the "
                         "query with tf_dp.build_query(..., secure_mode=True) "
                         "and pass it as dp_query instead.")
    if self.dp_query is None:
      self._set(l2_norm_clip=checks.check_positive(
          "l2_norm_clip", self.l2_norm_clip, " Typical values are 0.1 to 10: "
          "the median per-example gradient norm is a good start."))
      self._set(noise_multiplier=checks.check_non_negative(
          "noise_multiplier", self.noise_multiplier, " Use tf_dp.analysis."
          "compute_noise_multiplier to pick one for a target epsilon."))
      if self.noise_multiplier == 0:
        warnings.warn("noise_multiplier=0 adds no noise: the ledger will "
                      "report epsilon = inf.", UserWarning, stacklevel=3)
    if self.num_microbatches is not None:
      self._set(num_microbatches=checks.check_positive_int(
          "num_microbatches", self.num_microbatches))
    self._set(gradient_accumulation_steps=checks.check_positive_int(
        "gradient_accumulation_steps", self.gradient_accumulation_steps))
    if self.metrics_noise_stddev is not None:
      self._set(metrics_noise_stddev=checks.check_non_negative(
          "metrics_noise_stddev", self.metrics_noise_stddev))
    checks.check_choice("per_example_method", self.per_example_method,
                        PER_EXAMPLE_METHODS)
    self._set(sampling=Sampling.check("sampling", self.sampling))
    self._check_noise_strategy()
    self._check_privacy_unit()
    if self.ledger is not None:
      if not isinstance(self.ledger, PrivacyLedger):
        raise TypeError(f"ledger must be a tf_dp.PrivacyLedger; got "
                        f"{self.ledger!r}.")
      self._take_unset_values_from(self.ledger)
    if self.population_size is None and not self.population_size_deferred():
      raise PrivacyError(f"population_size is required here (sampling="
                         f"{self.sampling!r}). "
                         + population_size_required(self.caller))
    if self.population_size is not None:
      self._set(population_size=checks.check_positive_int(
          "population_size", self.population_size, " It is the number of "
          "training examples: "
          + self.caller.setting("population_size", "len(x_train)") + "."))
    if self.sampling is Sampling.POISSON:
      if self.sampling_probability is None or not (
          0 < self.sampling_probability <= 1):
        raise ValueError(
            "sampling='poisson' needs sampling_probability in (0, 1] (the q "
            "of tf_dp.data.poisson_sampled_batches); got "
            f"{self.sampling_probability!r}.")
      if self.num_microbatches is not None and (
          self.privacy_unit is PrivacyUnit.EXAMPLE):
        raise PrivacyError(
            "num_microbatches cannot be combined with sampling='poisson': "
            "Poisson-sampled examples do not form fixed microbatches. Use "
            "sampling='fixed_size' with microbatches.")

  def _set(self, **values: Any) -> None:
    """Sets normalised values while validating (the instance is frozen)."""
    for name, value in values.items():
      object.__setattr__(self, name, value)

  def _check_noise_strategy(self):
    """Validates ``noise_strategy`` (a ``matrix_factorization.Strategy`` or
    its ``strategy_to_dict`` form) and what it cannot be combined with."""
    if self.noise_strategy is None:
      return
    if isinstance(self.noise_strategy, dict):
      self._set(noise_strategy=accounting.strategy_from_dict(
          self.noise_strategy))
    if not isinstance(self.noise_strategy, mf.Strategy):
      raise TypeError(
          f"noise_strategy must be a tf_dp.analysis.matrix_factorization."
          f"Strategy (banded_strategy(steps, bands) or tree_strategy(steps)); "
          f"got {self.noise_strategy!r}.")
    self._set(max_passes=checks.check_positive_int(
        "max_passes", self.max_passes,
        " It is the most passes over the data (epochs) the run may make."))
    refused = {
        "dp_query": self.dp_query is not None,
        "ledger": self.ledger is not None,
        "num_microbatches": self.num_microbatches is not None,
        "metrics_noise_stddev": self.metrics_noise_stddev is not None,
        "clipping": self.clipping != "flat",
        "noise_allocation": self.noise_allocation != "proportional",
        "sampling": self.sampling is not Sampling.SHUFFLED}
    bad = [name for name, is_set in refused.items() if is_set]
    if bad:
      raise PrivacyError(
          f"noise_strategy (correlated noise across lots) takes one flat "
          f"clip and noise multiplier, batches in a fixed order "
          f"(sampling=\"shuffled\", fit(..., shuffle=False)) and its own "
          f"ledger; it cannot be combined with {bad}. Leave them at their "
          f"defaults.")
    # Refuses a strategy whose sensitivity is unbounded for max_passes.
    self.noise_strategy.sensitivity(
        self.max_passes,
        self.noise_strategy.bands if self.max_passes > 1 else None)
  def _check_privacy_unit(self):
    """Validates ``privacy_unit`` and what it needs: a user-level step takes
    lots drawn over users (Poisson or fixed-size, from
    ``tf_dp.data.poisson_sampled_users`` / ``fixed_size_sampled_users``),
    each user's ``max_examples_per_user`` rows as one record."""
    self._set(privacy_unit=PrivacyUnit.check("privacy_unit",
                                             self.privacy_unit))
    k = self.max_examples_per_user
    if self.privacy_unit is PrivacyUnit.EXAMPLE:
      if k is not None:
        raise PrivacyError(
            f"max_examples_per_user={k!r} is the cap of user-level lots; it "
            f"needs privacy_unit='user'. Pass privacy_unit='user' (with lots "
            f"from tf_dp.data.poisson_sampled_users), or leave "
            f"max_examples_per_user out.")
      return
    if k is None or not checks.is_int(k) or k < 1:
      raise ValueError(
          f"privacy_unit='user' needs max_examples_per_user, an integer >= 1 "
          f"(the k of tf_dp.data.poisson_sampled_users: rows per user in a "
          f"lot); got {k!r}.")
    if self.sampling in (Sampling.SHUFFLED, Sampling.FIXED_ORDER):
      raise SamplingMismatchError(
          "privacy_unit='user' needs lots drawn over users: pass "
          "sampling='poisson' (lots from tf_dp.data.poisson_sampled_users) or "
          "sampling='fixed_size' (tf_dp.data.fixed_size_sampled_users); "
          "shuffled or ordered batches of examples do not sample users.")
    for name, value, why in (
        ("num_microbatches", self.num_microbatches,
         "a user's rows are the record"),
        ("metrics_noise_stddev", self.metrics_noise_stddev,
         "private metrics clip each example, not each user")):
      if value is not None:
        raise PrivacyError(f"{name}={value!r} cannot be combined with "
                           f"privacy_unit='user' ({why}). Leave {name} out.")

  def _take_unset_values_from(self, ledger):
    """With a given ledger: n is the ledger's; ``sampling="shuffled"`` (the
    default) takes the ledger's sampling, and a Poisson lot without
    ``sampling_probability`` the ledger's q. What the lots record is still
    this configuration (``tf_dp.core.lot.sampling_event``), never a stale
    value of the ledger's.

    Raises:
      SamplingMismatchError: if ``population_size`` or a non-default
        ``sampling`` contradicts the ledger's.
    """
    ledger_n = int(ledger.population_size.numpy())
    if self.population_size is not None and self.population_size != ledger_n:
      raise SamplingMismatchError(
          f"population_size={self.population_size!r} but the given ledger "
          f"records n = {ledger_n}. Pass the ledger alone (its n is used) or "
          f"a ledger built with PrivacyLedger({self.population_size}, ...).")
    self._set(population_size=ledger_n)
    if self.sampling is Sampling.SHUFFLED:
      self._set(sampling=ledger.sampling)
    elif self.sampling != ledger.sampling:
      raise SamplingMismatchError(
          f"sampling={self.sampling!r} but the given ledger was built with "
          f"sampling={ledger.sampling!r}. Pass the sampling the lots are "
          f"really drawn with to both, or leave sampling out to use the "
          f"ledger's.")
    if self.sampling is Sampling.POISSON and self.sampling_probability is None:
      self._set(sampling_probability=float(
          ledger.sampling_probability.numpy()))
    if ledger.privacy_unit != self.privacy_unit:
      raise SamplingMismatchError(
          f"privacy_unit={self.privacy_unit!r} but the given ledger was built "
          f"with privacy_unit={ledger.privacy_unit!r}. Build the ledger with "
          f"PrivacyLedger(..., privacy_unit={self.privacy_unit!r}).")

  def population_size_deferred(self) -> bool:
    """Whether ``population_size`` may come later, from the length of the
    arrays given to ``fit`` (shuffled or fixed-order batches, the
    optimizer's own ledger)."""
    return (self.sampling in (Sampling.SHUFFLED, Sampling.FIXED_ORDER)
            and self.ledger is None
            and not isinstance(self.dp_query, QueryWithLedger))

  def to_dict(self) -> Dict[str, Any]:
    """The arguments of an equal configuration (without ``dp_query`` and
    ``ledger``)."""
    out = dataclasses.asdict(self)
    out["sampling"] = self.sampling.value
    if self.noise_strategy is not None:
      out["noise_strategy"] = accounting.strategy_to_dict(self.noise_strategy)
    out["privacy_unit"] = self.privacy_unit.value
    del out["caller"]
    for key in ("dp_query", "ledger"):
      if out[key] is not None:
        raise ValueError(f"A DPOptimizer with a custom {key} cannot be "
                         f"serialised to a config; rebuild it in code.")
      del out[key]
    return out
