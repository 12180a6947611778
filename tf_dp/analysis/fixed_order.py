"""Accounting of lots taken in a fixed order: passes, never sampling.

Lots recorded as ``"fixed_order"`` (``tf_dp.sampling.Sampling.FIXED_ORDER``)
are the consecutive lots of passes over the data in an order that may be
known (``fit(..., shuffle=False)``, a ``tf.data`` pipeline without a
shuffle). No lot is random, so no amplification by sampling is claimed.

Neighbouring relation: replace one example (the data set keeps its size and
order, one example's content changes), as for fixed-size and shuffled lots;
adding or removing one example would move every later example to another
lot, which a fixed order cannot account for. The changed example is in
exactly one lot of each pass, whose clipped sum changes by at most ``2C``;
every other lot of the pass is unchanged. So a pass is, for that example,
one Gaussian mechanism of sensitivity ``2C`` and noise ``sigma C``
(parallel composition), and the passes compose adaptively: ``P`` passes
are ``mu = 2 sqrt(P) / sigma``-GDP (Dong, Roth & Su 2022), RDP
``2 alpha P / sigma^2`` at order alpha (Mironov 2017, Prop. 7). When the
noise multiplier varies within a pass, the pass is charged its smallest.

How the ledger's lots make passes (``pass_runs``): a lot of ``m = q n``
examples fills the open pass; the pass closes when its lots hold n
examples, and a trailing pass that never filled counts as a whole one.
A pass is assumed to start where the previous one closed, so a front end
that restarts the order before a pass is full (``fit`` starting a new
epoch or a new fit) first closes it with a lot that released nothing
(``tf_dp.keras.fit_order.close_open_pass``). The lots of one pass must be
disjoint: that is the recorder's promise (each example once per pass).

Pure Python: no TensorFlow.
"""

import math
from typing import Any, Dict, Iterable, List, Optional, Tuple

import numpy as np

from tf_dp.analysis import checks
from tf_dp.analysis import pld_gaussian
from tf_dp.sampling import Sampling

# Clips one replaced example's change spans in its lot (replace-one).
SENSITIVITY = 2.0


def lot_examples(event: Any) -> int:
  """The examples of a recorded lot: ``q * n`` rounded (q is recorded as
  the lot's examples over n)."""
  return int(round(event.sampling_probability * event.population_size))


class _OpenPass:
  """The pass being filled: its examples so far and smallest noise."""

  def __init__(self) -> None:
    self.examples = 0
    self.noise_multiplier = math.inf

  def add(self, lots: int, examples: int, noise_multiplier: float) -> None:
    if not lots:
      return
    self.examples += lots * examples
    self.noise_multiplier = min(self.noise_multiplier, noise_multiplier)


class _Passes:
  """The passes of fixed-order runs: closed ones by cost, and the open one."""

  def __init__(self) -> None:
    self.others: List[Tuple[Any, int]] = []
    self.closed: Dict[Any, int] = {}
    self.open = _OpenPass()
    self.template: Any = None

  def close(self, noise_multiplier: float, count: int = 1) -> None:
    key = self.template._replace(sampling=Sampling.FIXED_SIZE,
                                 sampling_probability=1.0,
                                 noise_multiplier=noise_multiplier)
    self.closed[key] = self.closed.get(key, 0) + count

  def add_run(self, event: Any, count: int) -> None:
    """Fills the open pass with ``count`` lots of ``event``, closing every
    pass whose lots reach n examples."""
    examples, n = lot_examples(event), int(event.population_size)
    if examples == 0 or count == 0:
      return  # A lot of no example changes for no replaced example.
    self.template = event
    sigma, left = float(event.noise_multiplier), int(count)
    to_close = -(-(n - self.open.examples) // examples)
    if left < to_close:
      self.open.add(left, examples, sigma)
      return
    self.close(min(self.open.noise_multiplier, sigma))
    left -= to_close
    per_pass = -(-n // examples)
    if left // per_pass:
      self.close(sigma, left // per_pass)
    self.open = _OpenPass()
    self.open.add(left % per_pass, examples, sigma)


def _passes(runs: Iterable[Tuple[Any, int]]) -> _Passes:
  passes = _Passes()
  for event, count in runs:
    if Sampling.check("sampling", event.sampling) is Sampling.FIXED_ORDER:
      passes.add_run(event, count)
    else:
      passes.others.append((event, count))
  return passes


def pass_runs(runs: Iterable[Tuple[Any, int]]) -> List[Tuple[Any, int]]:
  """``runs`` with their fixed-order lots replaced by one event per pass.

  Args:
    runs: ``(event, count)`` pairs in the ledger's order; an event has the
      fields of ``tf_dp.analysis.ledger.LedgerEvent`` (a ``NamedTuple``).

  Returns:
    The other runs unchanged, then ``(event, passes)`` pairs: a pass is
    ``event._replace(sampling="fixed_size", sampling_probability=1.0,
    noise_multiplier=<its smallest>)``, an unsampled Gaussian mechanism
    under replace-one neighbours (sensitivity 2C), which both accountants
    compose exactly. Passes of equal cost share a pair; a trailing pass
    that never filled counts as a whole one.
  """
  passes = _passes(runs)
  if passes.open.examples:
    passes.close(passes.open.noise_multiplier)
  return passes.others + list(passes.closed.items())


def open_pass(runs: Iterable[Tuple[Any, int]]) -> Tuple[int, Any]:
  """``(examples, event)``: the examples the trailing, unfilled pass of
  ``runs``' fixed-order lots holds (0 if it is full) and its last lot's
  event (None without fixed-order lots): a front end that restarts the
  order closes that pass first with a lot of the missing examples that
  releases nothing."""
  passes = _passes(runs)
  return passes.open.examples, passes.template


def fixed_order_rdp(noise_multiplier: float, passes: int,
                    orders: Optional[checks.FloatArray] = None) -> np.ndarray:
  """RDP of ``passes`` fixed-order passes: ``2 alpha passes / sigma^2``.

  Privacy contract: replace-one neighbours; each pass one Gaussian
  mechanism of sensitivity 2C and noise ``noise_multiplier * C`` for the
  replaced example (module docstring).
  """
  from tf_dp.analysis import rdp  # pylint: disable=g-import-not-at-top
  orders = checks.check_orders(rdp.DEFAULT_ORDERS if orders is None
                               else orders)
  sigma = checks.check_noise_multiplier("noise_multiplier", noise_multiplier)
  passes = checks.check_steps("passes", passes)
  if not passes or math.isinf(sigma):
    return np.zeros(len(orders))
  return orders * passes * SENSITIVITY ** 2 / (2.0 * sigma ** 2)


def fixed_order_epsilon(noise_multiplier: float, passes: int,
                        delta: float) -> float:
  """Epsilon at ``delta`` of ``passes`` fixed-order passes, exactly:
  ``mu = 2 sqrt(passes) / noise_multiplier``-GDP.

  Privacy contract: as ``fixed_order_rdp``; the answer is the exact
  epsilon of that composition of Gaussian mechanisms.

  Example:
    >>> eps = fixed_order_epsilon(4.0, 1, 1e-5)  # 1.99
  """
  sigma = checks.check_noise_multiplier("noise_multiplier", noise_multiplier,
                                        allow_zero=True)
  passes = checks.check_steps("passes", passes)
  delta = checks.check_delta("delta", delta)
  if not passes or math.isinf(sigma):
    return 0.0
  if sigma == 0:
    return math.inf
  return pld_gaussian.gaussian_dp_epsilon(
      delta, SENSITIVITY * math.sqrt(passes) / sigma)
