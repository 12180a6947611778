"""Post-hoc accounting of a privacy ledger (McMahan & Andrew 2018, Sec. 5).

Reads a ledger (a ``tf_dp.PrivacyLedger``, its ``to_dict()`` export, or that
export as JSON) as plain data, reduces each sample's Gaussian sum queries to
one equivalent query with eq. (1),

    z = (sum_g (S_g / sigma_g)^2)^(-1/2),

and composes the samples with the RDP accountant. No TensorFlow is imported.
``ledger_events`` gives the same reduction as plain event descriptions so
that any other accountant can re-process the ledger.
"""

import collections
import json
import math

import numpy as np

from tf_dp.analysis import conversion
from tf_dp.analysis import rdp as rdp_lib
from tf_dp.analysis import rdp_without_replacement

LedgerEvent = collections.namedtuple(
    "LedgerEvent", ["sampling", "selection_probability", "noise_multiplier",
                    "population_size", "examples_per_record"])


def ledger_as_dict(ledger):
  """The plain-data form of a ledger object, dict or JSON string."""
  if isinstance(ledger, str):
    ledger = json.loads(ledger)
  elif hasattr(ledger, "to_dict"):
    ledger = ledger.to_dict()
  if not isinstance(ledger, dict) or "samples" not in ledger:
    raise ValueError("ledger must be a PrivacyLedger, its to_dict() export or "
                     "that export as JSON.")
  dropped = int(ledger.get("dropped_samples", 0))
  if dropped:
    raise ValueError(
        f"The ledger was full and did not record {dropped} sample(s): epsilon "
        "cannot be computed. Create the PrivacyLedger with max_samples of at "
        "least the number of training steps.")
  return ledger


def sample_noise_multiplier(sum_queries):
  """Eq. (1): the noise multiplier of one sample's Gaussian sum queries.

  ``inf`` if nothing private was released (no queries, or all clips 0);
  ``0`` if some query released a non-zero clip without noise.
  """
  total = 0.0
  for q in sum_queries:
    clip, stddev = float(q["l2_norm_clip"]), float(q["noise_stddev"])
    if clip < 0 or stddev < 0 or math.isnan(clip) or math.isnan(stddev):
      raise ValueError(f"Invalid sum query in ledger: {q!r}.")
    if clip == 0:
      continue
    if stddev == 0 or math.isinf(clip):
      return 0.0
    total += (clip / stddev) ** 2
  return math.inf if total == 0 else total ** -0.5


def ledger_events(ledger):
  """One ``LedgerEvent`` per recorded sample (plain Python values)."""
  data = ledger_as_dict(ledger)
  return [LedgerEvent(s["sampling"], float(s["selection_probability"]),
                      sample_noise_multiplier(s["sum_queries"]),
                      int(s["population_size"]),
                      int(s.get("examples_per_record", 1)))
          for s in data["samples"]]


def compute_rdp_from_ledger(ledger, orders=None):
  """RDP (per order) of everything recorded in ``ledger``.

  Privacy contract: Poisson samples are accounted as the Poisson-subsampled
  Gaussian (add/remove one record); fixed-size samples as sampling without
  replacement (replace one record, sensitivity 2C). Samples that released
  nothing cost nothing; a sample with a non-zero clip and zero noise makes
  the RDP infinite. A Poisson ledger whose records are microbatches is
  refused: Poisson sampling of examples does not sample microbatches.
  """
  orders = np.asarray(rdp_lib.DEFAULT_ORDERS if orders is None else orders,
                      dtype=float)
  counts = collections.Counter()
  for e in ledger_events(ledger):
    if e.sampling == "poisson" and e.examples_per_record > 1:
      raise ValueError(
          "The ledger records Poisson sampling with microbatches as records; "
          "use fixed-size batches (sampling='fixed_size') with microbatches.")
    counts[(e.sampling, e.selection_probability, e.noise_multiplier)] += 1
  total = np.zeros(len(orders))
  poisson = []
  for (sampling, q, z), n in counts.items():
    if math.isinf(z) or q == 0:
      continue
    if z == 0:
      return np.full(len(orders), np.inf)
    if sampling == "poisson":
      poisson.append((q, z, n))
    else:
      total += rdp_without_replacement.compute_rdp_sample_without_replacement(
          q, z, n, orders)
  if poisson:
    total += rdp_lib.compute_heterogeneous_rdp(poisson, orders)
  return total


def compute_epsilon_from_ledger(ledger, delta, orders=None,
                                conversion_method="tight"):
  """(epsilon, optimal_order) of everything recorded in ``ledger``."""
  orders = rdp_lib.DEFAULT_ORDERS if orders is None else orders
  rdp = compute_rdp_from_ledger(ledger, orders)
  if np.all(np.isinf(rdp)):
    return math.inf, math.nan
  if not np.any(rdp):
    return 0.0, math.nan  # Nothing private was released.
  eps, _, order = conversion.get_privacy_spent(
      orders, rdp, target_delta=delta, conversion=conversion_method)
  return eps, order


def to_dp_accounting_events(ledger):
  """The ledger as ``dp_accounting`` events (needs the optional package).

  Each sample becomes a ``PoissonSampledDpEvent`` (add/remove neighbours) or a
  ``SampledWithoutReplacementDpEvent`` whose Gaussian noise multiplier is
  taken relative to the replace-one sensitivity 2C (hence z / 2).
  """
  import dp_accounting  # pylint: disable=g-import-not-at-top
  out = []
  for e in ledger_events(ledger):
    if math.isinf(e.noise_multiplier):
      continue
    if e.sampling == "poisson":
      out.append(dp_accounting.PoissonSampledDpEvent(
          e.selection_probability,
          dp_accounting.GaussianDpEvent(e.noise_multiplier)))
    else:
      batch = int(round(e.selection_probability * e.population_size))
      out.append(dp_accounting.SampledWithoutReplacementDpEvent(
          e.population_size, batch,
          dp_accounting.GaussianDpEvent(e.noise_multiplier / 2)))
  return out
