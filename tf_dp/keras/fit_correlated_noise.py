"""``fit`` under ``DPOptimizer(noise_strategy=...)``: the participation a
correlated-noise run is accounted with, checked before any step."""

import hashlib
from typing import Any, Dict, Optional

import numpy as np
import tensorflow as tf

from tf_dp.core import lot_engine
from tf_dp.errors import PrivacyError


def check_correlated_noise_fit(engine: lot_engine.LotEngine,
                               bound: Dict[str, Any],
                               examples: Optional[int]) -> None:
  """With ``noise_strategy``: refuses a ``fit`` whose participation the
  strategy does not cover, and declares its passes to the ledger.

  Privacy contract: a correlated-noise run is accounted from the passes
  and the fewest steps between two participations of one example. They
  are known only for arrays taken in one fixed order
  (``fit(..., shuffle=False)``, whole epochs: each example once per pass
  at the same step of the pass, so ``steps_per_pass`` apart); anything else
  is refused before any step, and so is a fit that would run more steps
  than the strategy was built for or more passes than ``max_passes``.

  Raises:
    PrivacyError: naming what is not covered and the fix.
  """
  config = engine.config
  strategy = config.noise_strategy
  if strategy is None:
    return
  if examples is None:
    raise PrivacyError(
        "DPOptimizer(noise_strategy=...) trains on arrays or tensors with "
        "fit(..., shuffle=False): the order of a dataset or generator, and "
        "so how far apart one example's participations are, cannot be "
        "checked. Pass arrays (shuffled once beforehand if you like).")
  if bound.get("shuffle", True) is not False:
    raise PrivacyError(
        "DPOptimizer(noise_strategy=...) needs fit(..., shuffle=False): Keras "
        "reshuffles arrays every epoch, which can put one example in two "
        "consecutive steps, where the strategy's sensitivity does not hold. "
        "Shuffle the arrays once before fit if you like.")
  if bound.get("steps_per_epoch"):
    raise PrivacyError(
        "DPOptimizer(noise_strategy=...) runs whole passes: leave "
        "steps_per_epoch out.")
  batch_size = bound.get("batch_size") or 32
  batches = -(-examples // batch_size)
  per_lot = config.gradient_accumulation_steps
  if batches % per_lot:
    raise PrivacyError(
        f"With noise_strategy, a pass of {batches} batches must hold whole "
        f"lots of gradient_accumulation_steps={per_lot} batches.")
  steps_per_pass = batches // per_lot
  ledger = engine.ledger.correlated_noise
  digest = _training_data_digest(bound, examples, batch_size * per_lot)
  ledger.check_steps_per_pass(steps_per_pass, digest)
  run = int(ledger.steps_run.numpy())
  epochs = int(bound.get("epochs", 1)) - int(bound.get("initial_epoch", 0))
  total = run + max(epochs, 0) * steps_per_pass
  passes = -(-total // steps_per_pass)
  if total > strategy.steps or passes > config.max_passes:
    raise PrivacyError(
        f"This fit would bring the correlated-noise run to {total} steps in "
        f"{passes} passes of {steps_per_pass} steps, but the strategy was "
        f"built for {strategy.steps} steps and max_passes="
        f"{config.max_passes}. Build the strategy for at least {total} steps "
        f"and DPOptimizer(..., max_passes={passes}), or train fewer epochs.")
  if passes > 1 and steps_per_pass < strategy.bands:
    raise PrivacyError(
        f"A pass of {steps_per_pass} steps is shorter than the strategy's "
        f"{strategy.bands} bands: one example's participations would share "
        f"noise rows. Use a strategy with at most {steps_per_pass} bands, or "
        f"smaller batches.")
  ledger.set_steps_per_pass(steps_per_pass, digest, passes=max(epochs, 0))


def end_correlated_noise_fit(engine: lot_engine.LotEngine) -> None:
  """With ``noise_strategy``: ends the passes the last
  ``check_correlated_noise_fit`` declared (call when that ``fit`` returns
  or raises): a later step outside a ``fit`` (``train_on_batch``,
  ``private_step``) is then recorded as outside the fixed order, and the
  record is refused."""
  ledger = getattr(engine.ledger, "correlated_noise", None)
  if engine.config.noise_strategy is not None and ledger is not None:
    ledger.end_declared_passes()


def check_step_outside_fit(engine: lot_engine.LotEngine, call: str) -> None:
  """Refuses (eagerly, before the step) a ``call`` step of a
  correlated-noise run whose earlier steps were ``fit``'s fixed-order
  passes: its examples are not a pass's, and the participation the ledger
  records for the passes would not hold.

  Raises:
    PrivacyError: naming ``fit(..., shuffle=False)`` as the way on.
  """
  ledger = getattr(engine.ledger, "correlated_noise", None)
  if (engine.config.noise_strategy is None or ledger is None
      or not int(ledger.steps_per_pass.numpy())):
    return
  raise PrivacyError(
      f"This correlated-noise run's steps so far were fit's passes over its "
      f"arrays in one fixed order, accounted as each example taking part "
      f"once per pass, a pass apart. A {call} step takes examples outside "
      f"that order (an example could take part again at once), so the "
      f"record would no longer hold. Continue with fit(..., shuffle=False) "
      f"on the same arrays.")


def _training_data_digest(bound: Dict[str, Any], examples: int,
                          rows_per_lot: int) -> str:
  """SHA-256 of the first ``examples`` rows of ``fit``'s x and y, in
  order, and of the rows per lot: a later fit of the same correlated-noise
  run must take the same examples in the same order, cut into the same
  lots (the step of example i in a pass is ``i // rows_per_lot``)."""
  digest = hashlib.sha256()
  digest.update(f"rows_per_lot{int(rows_per_lot)}".encode())
  for part in ("x", "y", "sample_weight"):
    for leaf in tf.nest.flatten(bound.get(part)):
      if leaf is None:
        continue
      rows = np.ascontiguousarray(np.asarray(leaf)[:examples])
      digest.update(f"{part}{rows.dtype}{rows.shape}".encode())
      digest.update(rows.data.cast("B"))
  return digest.hexdigest()
