"""What a DP optimizer saves with the model besides the wrapped optimizer.

A Keras optimizer's saved state is its step counter and slots. A DP
optimizer's privacy state is, in addition, its **ledger** (every lot noised so
far: the accountant's only input). It travels with the model in every Keras
format, as plain arrays under names that start with ``tf_dp_``: the ledger's
rows actually written (not its whole preallocated buffers), its counters and
its current sampling parameters.

Not saved: the query's global state (e.g. an adaptive clip), which is
re-initialised when training continues; the noise key, which never leaves
the process; and an open lot (the clipped sum of the batches of a lot not yet
noised, when ``gradient_accumulation_steps > 1``): it is an un-noised
function of the data, so it is never written to disk, and a model saved in
the middle of a lot continues with a fresh lot (nothing of the open one was
released).

What any file may hold is decided where every writer reaches state, never
per format: TF's object graph (``LotEngine._trackable_children``, walked by
checkpoints, BackupAndRestore, TF-format weights and SavedModels, whatever
the API) and Keras's own state (``export_state`` here, asked for by the
``.keras``, ``.h5`` and ``.weights.h5`` writers). The secrets (the noise key,
an open lot, a correlated-noise query's last noises) are reachable through
neither, and Keras's un-noised training metric totals are reset whenever a
private model is written (``tf_dp.keras.written_metrics``).

A ledger that cannot be restored is never restarted silently: the wrapped
optimizer's ``iterations`` counts the lots applied (one ``apply`` per lot),
and ``check_ledger_covers`` refuses to train when it exceeds the lots the
ledger recorded.
"""

from typing import Any, Dict, Mapping, Optional, Sequence

import numpy as np
import tensorflow as tf

from tf_dp.core import lot_engine
from tf_dp.errors import IncompleteLedgerError
from tf_dp.errors import LedgerFormatError
from tf_dp.errors import PrivacyError
from tf_dp.privacy_ledger import BUFFER_KEYS
from tf_dp.privacy_ledger import PrivacyLedger

PREFIX = "tf_dp_"

# The saved arrays' names (after PREFIX), in the order ``.h5`` files list
# them, and the ledger's ``export_buffers`` key each one holds: a file
# format ("ledger_" and the key, in the order of ``BUFFER_KEYS``).
_SAVED_NAMES = tuple((f"ledger_{key}", key) for key in BUFFER_KEYS)
LEDGER_KEYS = tuple(saved for saved, _ in _SAVED_NAMES)


def numpy(variable: Any) -> np.ndarray:
  return np.asarray(tf.convert_to_tensor(variable))


def export_state(engine: lot_engine.LotEngine) -> Dict[str, np.ndarray]:
  """The engine's ledger as ``{saved name: numpy array}`` (its
  ``export_buffers``: the rows written, the counters, the sampling
  parameters)."""
  if getattr(engine.ledger, "correlated_noise", None) is not None:
    raise PrivacyError(
        "A model trained with DPOptimizer(..., noise_strategy=...) cannot be "
        "saved with its optimizer: the correlated-noise record and noise "
        "state would not be restored, and a continued run would be "
        "accounted without its first part. Save the weights alone, "
        "model.get_weights() (e.g. with numpy.savez; Keras 3's save_weights "
        "and .keras files hold the optimizer too; on Keras 2, "
        "save_weights to a legacy '.h5' file and model.save to an '.h5' "
        "file with include_optimizer=False leave it out), and keep "
        "ledger.to_json().")
  buffers = engine.ledger.export_buffers()
  return {saved: buffers[key] for saved, key in _SAVED_NAMES}


def restore_ledger(ledger: PrivacyLedger, state: Mapping[str, Any]) -> None:
  """Overwrites ``ledger`` with the exported ledger in ``state``.

  Raises:
    LedgerFormatError: if ``state`` holds part of a ledger (a saved name
      missing: an epsilon computed from the rest could be too small).
    ValueError: if the saved ledger holds more rows than ``ledger`` has
      room for, naming ``max_lots``.
  """
  missing = [saved for saved, _ in _SAVED_NAMES if saved not in state]
  if missing:
    raise LedgerFormatError(
        f"The saved DP optimizer state holds part of a privacy ledger: "
        f"{[PREFIX + name for name in missing]} are missing. Load the file "
        f"the model was saved to whole, or compile a new tf_dp.DPOptimizer "
        f"that continues a ledger read whole (ledger=tf_dp.PrivacyLedger."
        f"from_dict(data, max_samples=...)).")
  try:
    ledger.import_buffers({key: state[saved] for saved, key in _SAVED_NAMES})
  except ValueError as e:
    raise IncompleteLedgerError(
        f"The saved privacy ledger does not fit this optimizer's ledger: "
        f"{e} Rebuild the optimizer with a larger max_lots "
        f"(tf_dp.DPOptimizer(..., max_lots=...)) before loading.") from e


def restore_state(engine: lot_engine.LotEngine,
                  state: Mapping[str, Any]) -> None:
  """Overwrites the built engine's ledger with ``state``; any open lot is
  emptied (it is never saved)."""
  restore_ledger(engine.ledger, state)
  engine.discard_lot()


def check_ledger_covers(applied: int, ledger: PrivacyLedger,
                        reading: bool = False) -> None:
  """Raises if the optimizer applied more lots than the ledger recorded.

  Args:
    applied: Lots applied so far (the wrapped optimizer's step counter: one
      step per lot).
    ledger: The ``PrivacyLedger`` that training will continue.
    reading: True when the ledger is being read (for its epsilon) rather
      than continued.

  Raises:
    IncompleteLedgerError: when the ledger of earlier training was not
      restored.
  """
  recorded = int(numpy(ledger.sample_count))  # Written and dropped.
  if applied <= recorded:
    return
  what = ("tf_dp refuses to read this optimizer's privacy ledger"
          if reading else "tf_dp refuses to continue training")
  harm = ("its epsilon would be too small" if reading else
          "continuing would under-report epsilon")
  raise IncompleteLedgerError(
      f"{what}: the optimizer has already "
      f"applied {applied} lots (its `iterations`, or the count saved with "
      f"its config), but its privacy ledger records only {recorded}. The "
      f"ledger of the earlier training was not restored, and {harm}. "
      f"Fix it in one of these ways: (1) load "
      f"the model together with its ledger: `model.save` + "
      f"`keras.models.load_model` (.keras, or .h5 on Keras 2), "
      f"`save_weights` + `load_weights`, BackupAndRestore, or a "
      f"`tf.train.Checkpoint` of the optimizer; (2) compile with a new "
      f"optimizer that continues the earlier ledger: `tf_dp.DPOptimizer(..., "
      f"ledger=tf_dp.PrivacyLedger.from_dict(data, max_samples=...))`, with "
      f"`data = tf_dp.estimator.ledger_from_checkpoint(path)` (after "
      f"`import tf_dp.estimator`) for a "
      f"checkpoint or a Keras 2 SavedModel (whose loader drops optimizer "
      f"state) or a saved `ledger.to_dict()`; or (3) compile with a fresh "
      f"`tf_dp.DPOptimizer` and account the earlier training separately "
      f"(add up both runs' privacy loss).")


class PendingState:
  """A loaded state waiting for the engine to be built (not trackable, so
  never saved itself)."""

  def __init__(self, state: Mapping[str, Any],
               keras_values: Optional[Sequence[Any]] = None) -> None:
    # Read now: values may be lazy datasets of a file about to be closed.
    self.state = {key: np.array(value) for key, value in state.items()}
    self.keras_values = (None if keras_values is None
                         else [np.array(value) for value in keras_values])


class SavedArray:
  """A named array that Keras 2's ``.h5`` writer saves like a variable."""

  def __init__(self, name: str, value: Any) -> None:
    self.name = name
    self._value = np.asarray(value)
    self.shape = self._value.shape
    self.dtype = self._value.dtype

  def numpy(self) -> np.ndarray:
    return self._value
