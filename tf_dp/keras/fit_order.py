"""A fixed order is never recorded as random: ``fit``'s order against the
sampling its ``DPOptimizer`` declares.

Under ``sampling="shuffled"`` the ledger records every batch as a random
sample of B of the n examples (q = B / n). In a fixed order no batch is
random: example i is in the same batch of every epoch, at a step anyone
who knows the order can name, and the ledger's epsilon would be far too
small (n = 1000, B = 10, noise_multiplier 4, one epoch, delta 1e-5: 0.21
recorded against 1.99 for the fixed order; n = 60000, B = 256, 1.1, three
epochs: 4.94 against 17.76). ``check_order`` refuses such a ``fit`` before
any step unless its order is declared (``sampling="fixed_order"``, accounted
without amplification: ``tf_dp.analysis.fixed_order``) or accounted by a
``noise_strategy``; ``close_open_pass`` keeps a fixed-order ledger's passes
whole when the order restarts.
"""

import types
from typing import Any, Dict, Optional, Tuple
import warnings

import tensorflow as tf

from tf_dp.analysis import ledger as ledger_accounting
from tf_dp.analysis import fixed_order as fixed_order_accounting
from tf_dp.core import config as config_lib
from tf_dp.core import lot_engine
from tf_dp.core import caller_api
from tf_dp.data import lots as data_lots
from tf_dp.data import order as data_order
from tf_dp.errors import SamplingMismatchError
from tf_dp.keras import fit_arguments
from tf_dp.privacy_ledger import SamplingEvent
from tf_dp.sampling import Sampling


def fixes(caller: caller_api.CallerApi = caller_api.TF_DP) -> str:
  """The fixes every refusal names, in the API of ``caller``'s constructor."""
  declare_order = caller.setting("sampling", '"fixed_order"')
  correlated_noise = caller.setting("noise_strategy", "...")
  return (
      "Fix it: (1) let the order be random: fit(x, y, shuffle=True) on "
      "arrays (Keras's default), or a tf.data pipeline that shuffles the "
      "examples before batching, every epoch, with a buffer of at least n "
      "(.shuffle(n).batch(B)); (2) draw the lots with tf_dp.data."
      "poisson_sampled_batches (sampling=\"poisson\") or "
      "fixed_size_sampled_batches (sampling=\"fixed_size\"); (3) declare the "
      f"order: {declare_order} accounts each pass as one Gaussian mechanism "
      f"per example, without amplification; for several passes in a fixed "
      f"order, {correlated_noise} (correlated noise, fit(..., shuffle=False)) "
      f"gives a smaller epsilon.")


def _array_order(bound: Dict[str, Any],
                 keras_backend: types.ModuleType) -> Optional[str]:
  """Why ``fit``'s arrays come in a fixed order, or None if Keras
  reshuffles their rows every epoch, or if one batch holds them all (every
  lot is then all n examples, recorded with q = 1: nothing is amplified,
  whatever the order)."""
  shuffle = bound.get("shuffle", True)
  examples = fit_arguments.training_examples(bound)
  if examples is not None and (bound.get("batch_size") or 32) >= examples:
    return None
  if shuffle is False:
    return ("fit(..., shuffle=False) takes the arrays' batches in their "
            "given order every epoch")
  if shuffle == "batch":
    how = ("keeps the batches' order and shuffles only within each batch"
           if keras_backend.SHUFFLE_BATCH_KEEPS_BATCH_ORDER else
           "shuffles only the order of fixed batches of consecutive rows")
    return (f"fit(..., shuffle=\"batch\") {how}: each example is always in "
            f"the same batch")
  return None


def _input_order(
    x: Any, bound: Dict[str, Any], keras_backend: types.ModuleType,
    population_size: Optional[int]
) -> Tuple[Optional[str], Optional[Tuple[int, int]]]:
  """``(reason, seed)``: why ``fit``'s input is not shown random (None if
  it is) and a dataset shuffle's fixed seed."""
  if isinstance(x, tf.data.Dataset):
    if data_lots.declared_sampling(x) is not None:
      return None, None  # A sampler's lots: check_sampling_of_fit_input.
    order = data_order.batch_order(x, population_size)
    return (None if order.random else f"the tf.data pipeline given to fit "
            f"is not a fresh shuffle of the examples every epoch: "
            f"{order.reason}"), order.seed
  leaves = tf.nest.flatten(x) if x is not None else []
  if leaves and all(hasattr(leaf, "shape") for leaf in leaves):
    return _array_order(bound, keras_backend), None
  return (f"fit was given a {type(x).__name__}, whose batches tf_dp cannot "
          f"read: nothing shows they are random samples of the examples"), None


def check_order(config: config_lib.DPConfig, bound: Dict[str, Any],
                keras_backend: types.ModuleType,
                population_size: Optional[int]) -> None:
  """Refuses, before any step, a ``fit`` under ``sampling="shuffled"``
  whose batches are not shown to be a fresh random shuffle of the examples.

  Shown random: arrays with Keras's ``shuffle=True`` (or in one batch
  of all of them, whose lots record q = 1, no amplification), and a
  ``tf.data`` pipeline whose batching reads a shuffle of the rows that reshuffles every
  epoch with a buffer of at least n (``tf_dp.data.order.batch_order``).
  Not shown: arrays with ``shuffle=False`` or ``shuffle="batch"``, a
  pipeline in order, shuffled after batching, or with a smaller buffer,
  and inputs tf_dp cannot read (generators, ``keras.utils.PyDataset`` /
  ``Sequence``). A sampler's marked dataset is checked by
  ``fit_sampling.check_sampling_of_fit_input``; with a ``noise_strategy``
  the fixed order is the accounted one (``check_correlated_noise_fit``).
  A pipeline shuffled with a fixed seed (its own or ``tf.random.set_seed``)
  trains with a warning, as a seeded sampler does.

  Privacy contract: what the ledger records as ``"shuffled"`` was shuffled
  (under the conventional approximation of ``Sampling.SHUFFLED``).

  Args:
    config: The ``DPConfig`` of the model's ``DPOptimizer``.
    bound: ``fit``'s arguments by name (``fit_arguments.keras_arguments``).
    keras_backend: The adapter of the model's Keras flavour.
    population_size: The n the ledger will record (None if not known).

  Raises:
    SamplingMismatchError: naming what is in a fixed order and the fixes.
  """
  if config.sampling is not Sampling.SHUFFLED or (
      config.noise_strategy is not None):
    return
  if (population_size is None
      and fit_arguments.training_examples(bound) is None):
    return  # Not arrays and no n: fit refuses it for n first.
  reason, seed = _input_order(bound.get("x"), bound, keras_backend,
                              population_size)
  if reason is not None:
    raise SamplingMismatchError(
        f"{config.caller.constructor} with sampling=\"shuffled\" (the "
        f"default) records every batch as a random sample of the examples "
        f"(q = batch_size / n), but {reason}. In a fixed order each "
        f"example's batch and step are known, and the "
        f"ledger's epsilon would be far too small (that of unamplified "
        f"Gaussian mechanisms, one per pass, is several times larger). "
        + fixes(config.caller))
  if seed is not None:
    warnings.warn(
        f"fit trains on a tf.data pipeline shuffled with fixed seeds {seed} "
        f"(its own seed, or one derived from tf.random.set_seed): every run "
        f"with that seed takes the same batches, and anyone who knows it "
        f"knows which batch holds each example, while the ledger accounts "
        f"them as random. Leave the seeds unset outside tests.",
        UserWarning, stacklevel=4)  # the caller of fit


def close_open_pass(engine: lot_engine.LotEngine) -> None:
  """Closes the ledger's unfilled fixed-order pass with a lot of the
  missing examples that releases nothing (no noise, no query: it costs
  nothing), so that the next lots start a new pass.

  Privacy contract: ``tf_dp.analysis.fixed_order`` counts a pass as full
  when its lots hold n examples; ``fit`` restarts the order at every epoch
  and every ``fit`` (an epoch of a pipeline may hold fewer than n, a ``fit``
  may stop inside an epoch), and the lots after a restart must not be
  counted in the pass before it. Called at the start of every ``fit`` and
  the end of every epoch under ``sampling="fixed_order"``; it only ever
  adds passes.
  """
  if engine.config.sampling is not Sampling.FIXED_ORDER:
    return
  ledger = engine.ledger
  # A "shuffled" sample's warning is not this one's (nor used up here).
  runs = ledger_accounting.ledger_event_runs(ledger, warn_shuffled=False)
  examples, last = fixed_order_accounting.open_pass(runs)
  if not examples:
    return
  n = int(last.population_size)
  ledger.record_sample((), sampling_event=SamplingEvent(
      n, (n - examples) / n, Sampling.FIXED_ORDER, 1, last.privacy_unit))
