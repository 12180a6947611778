"""Saving and loading a private model keeps its privacy ledger, or refuses.

The continuation tests train 2 epochs (8 lots of 16 of 64 examples), save,
load and train 2 more epochs; the ledger must then hold all 16 lots and give
the epsilon of an uninterrupted 4-epoch run. The two ledgers hold the same
rows, so the epsilons agree to float rounding (rel=1e-9). The refusal tests
lose the ledger on purpose and expect a ValueError before any update.
"""

import json
import os
import subprocess
import sys
import textwrap
import zipfile

import numpy as np
import pytest
import tensorflow as tf

import tf_dp
from tests.keras import helpers
from tf_dp.estimator import checkpoint_ledger
from tf_dp.keras import backend

KERAS = helpers.keras_modules()
N, BATCH, LOTS_PER_EPOCH = 64, 16, 4
DELTA = 1e-5
_EXPECTED = {}
_TRAINED = {}


def _compiled(K, **dp_kwargs):
  model = helpers.build_model(K, "dense")
  model.build((None, 6))
  return helpers.compile_dp(K, model, N, noise_multiplier=1.3, **dp_kwargs)


def _fit(model, epochs, **kwargs):
  x, y = helpers.make_data("dense", N)
  model.fit(x, y, batch_size=BATCH, epochs=epochs, verbose=0, **kwargs)


def _epsilon(ledger):
  return tf_dp.analysis.compute_epsilon_from_ledger(ledger, DELTA)[0]


def _uninterrupted_epsilon(K):
  """The epsilon of 4 epochs in one run (computed once per flavour)."""
  if K.__name__ not in _EXPECTED:
    model = _compiled(K)
    _fit(model, 4)
    _EXPECTED[K.__name__] = _epsilon(model.optimizer.ledger)
  return _EXPECTED[K.__name__]


def _trained(K):
  """A model after 2 epochs (8 lots), trained once per flavour: the tests
  that save it, or read its weights and ledger, only read it."""
  if K.__name__ not in _TRAINED:
    model = _compiled(K)
    _fit(model, 2)
    _TRAINED[K.__name__] = model
  return _TRAINED[K.__name__]


def _assert_full_ledger(K, model):
  ledger = model.optimizer.ledger.to_dict()
  assert len(ledger["samples"]) == 4 * LOTS_PER_EPOCH  # None lost.
  assert int(model.optimizer.iterations.numpy()) == 4 * LOTS_PER_EPOCH
  assert _epsilon(ledger) == pytest.approx(_uninterrupted_epsilon(K),
                                           rel=1e-9)


def _is_keras3(K):
  return backend.keras3_module() is not None and K is backend.keras3_module()


def _save_and_load(K, fmt, model, tmp_path, make=None):
  """Saves ``model`` in ``fmt`` and returns the loaded, private model
  (``make(K)`` builds the model to load weights into; default: ``_compiled``).
  """
  if fmt in ("keras", "h5"):
    path = str(tmp_path / f"m.{fmt}")
    model.save(path)
    return tf_dp.keras.make_private(K.models.load_model(path))
  loaded = (make or _compiled)(K)
  if fmt == "weights":  # Keras 3: .weights.h5; Keras 2: a TF checkpoint.
    path = str(tmp_path / ("m.weights.h5" if _is_keras3(K) else "ckpt"))
    model.save_weights(path)
    loaded.load_weights(path)
  elif fmt == "checkpoint":
    path = tf.train.Checkpoint(model=model, optimizer=model.optimizer).save(
        str(tmp_path / "ckpt"))
    tf.train.Checkpoint(model=loaded, optimizer=loaded.optimizer).restore(
        path)
  else:
    raise ValueError(fmt)
  return loaded


def _formats(K):
  if _is_keras3(K):
    return ["keras", "weights", "checkpoint"]
  return ["h5", "keras", "weights", "checkpoint"]


CASES = [pytest.param(K.values[0], fmt, id=f"{K.id}-{fmt}")
         for K in KERAS for fmt in _formats(K.values[0])]


@pytest.mark.parametrize("K,fmt", CASES)
def test_save_load_continue_keeps_the_ledger(K, fmt, tmp_path):
  model = _trained(K)
  saved_epsilon = _epsilon(model.optimizer.ledger)
  assert saved_epsilon > 0
  # The ledger is saved; the noise key and any open lot are not.
  assert not [k for k in model.optimizer.dp_state()
              if "global" in k or "noise" in k or "seed" in k]
  loaded = _save_and_load(K, fmt, model, tmp_path)
  assert type(loaded.optimizer) is type(model.optimizer)
  np.testing.assert_array_equal(loaded.trainable_variables[0].numpy(),
                                model.trainable_variables[0].numpy())
  # Reading epsilon of a saved model before training it again: the loaded
  # ledger holds the 8 lots, and gives the saved model's epsilon.
  assert int(loaded.optimizer.ledger.sample_count) == 2 * LOTS_PER_EPOCH
  assert _epsilon(loaded.optimizer.ledger) == pytest.approx(saved_epsilon,
                                                            rel=1e-12)
  _fit(loaded, 2)
  _assert_full_ledger(K, loaded)


@pytest.mark.parametrize("K", KERAS)
def test_a_model_checkpoint_file_holds_the_ledger(K, tmp_path):
  path = str(tmp_path / ("best.keras" if _is_keras3(K) else "best.h5"))
  model = _compiled(K)
  _fit(model, 2, callbacks=[K.callbacks.ModelCheckpoint(path)])
  loaded = K.models.load_model(path)
  assert _epsilon(loaded.optimizer.ledger) == pytest.approx(
      _epsilon(model.optimizer.ledger), rel=1e-12)


@pytest.mark.parametrize("K", KERAS)
def test_backup_and_restore_keeps_the_ledger(K, tmp_path):
  backup_dir = str(tmp_path / "backup")

  class Interrupt(K.callbacks.Callback):

    def on_epoch_end(self, epoch, logs=None):
      if epoch == 1:
        raise RuntimeError("interrupted")

  first = _compiled(K)
  with pytest.raises(RuntimeError, match="interrupted"):
    _fit(first, 4, callbacks=[K.callbacks.BackupAndRestore(backup_dir),
                              Interrupt()])
  resumed = _compiled(K)  # A new process would build the model again.
  _fit(resumed, 4, callbacks=[K.callbacks.BackupAndRestore(backup_dir)])
  _assert_full_ledger(K, resumed)


@pytest.mark.parametrize("K", KERAS)
def test_open_lot_is_never_saved(K, tmp_path):
  """Poisson lots of 3 batches (tf_dp.data's sampler): saved with 2 batches
  of a lot open. The open lot is an un-noised sum of clipped gradients: it
  is not in the file (nor in a tf.train.Checkpoint), and the loaded model
  starts a fresh lot; the ledger holds exactly the lots released."""
  q = 3 * BATCH / N
  model = _compiled(K, gradient_accumulation_steps=3, sampling="poisson",
                    sampling_probability=q)
  x, y = helpers.make_data("dense", N)

  def fit_batches(model, batches, seed):
    lots = tf_dp.data.poisson_sampled_batches(x, y, q, 3, seed=seed,
                                              batches_per_lot=3)
    # A prefix of the sampler's lots, its last lot possibly cut short: a
    # derived dataset, declared as the sampler's lots it still holds.
    model.fit(tf_dp.data.declare_sampling(
        lots.take(batches), "poisson", q, batches_per_lot=3), epochs=1,
              verbose=0)

  fit_batches(model, 8, seed=1)  # 8 batches: 2 lots, 2 batches open.
  engine = model.optimizer.dp_engine
  assert int(engine.batches_in_lot.numpy()) == 2
  assert not [k for k in model.optimizer.dp_state() if "lot" in k]
  open_sum = np.concatenate([v.numpy().ravel()
                             for v in tf.nest.flatten(engine.lot_state)])
  assert np.any(open_sum)
  checkpoint = tf.train.Checkpoint(optimizer=model.optimizer)
  path = checkpoint.write(str(tmp_path / "ckpt"))
  for name, _ in tf.train.list_variables(path):
    assert "lot" not in name or "allowed" in name, name
  loaded = _save_and_load(K, "keras" if _is_keras3(K) else "h5", model,
                          tmp_path)
  fit_batches(loaded, 8, seed=2)  # 8 more: 2 fresh lots, 2 batches open.
  assert int(loaded.optimizer.dp_engine.batches_in_lot.numpy()) == 2
  assert len(loaded.optimizer.ledger.to_dict()["samples"]) == 4
  assert int(loaded.optimizer.iterations.numpy()) == 4


@pytest.mark.parametrize("K", [K for K in KERAS if K.id == "keras2"])
def test_keras2_saved_model_refuses_then_continues_from_its_ledger(K,
                                                                   tmp_path):
  """Keras 2's SavedModel loader drops optimizer state (and so the ledger):
  reading the loaded optimizer's ledger (an epsilon of 0 for 8 lots) and
  continuing are refused; the ledger is read from the SavedModel instead."""
  model = _trained(K)
  path = str(tmp_path / "saved_model")
  model.save(path, save_format="tf")
  loaded = tf_dp.keras.make_private(K.models.load_model(path))
  assert int(loaded.optimizer.iterations.numpy()) == 0  # State dropped.
  with pytest.raises(tf_dp.errors.IncompleteLedgerError,
                     match="applied 8 lots.*records only 0.*too small.*"
                     "ledger_from_checkpoint"):
    tf_dp.analysis.compute_epsilon_from_ledger(loaded.optimizer.ledger, 1e-5)
  with pytest.raises(ValueError, match="applied 8 lots"):
    _fit(loaded, 1)
  earlier = checkpoint_ledger.ledger_from_checkpoint(path)
  assert len(earlier["samples"]) == 2 * LOTS_PER_EPOCH
  loaded = helpers.compile_dp(
      K, loaded, N, noise_multiplier=1.3,
      ledger=tf_dp.PrivacyLedger.from_dict(earlier, max_samples=100))
  _fit(loaded, 2)
  ledger = loaded.optimizer.ledger.to_dict()
  assert len(ledger["samples"]) == 4 * LOTS_PER_EPOCH
  assert _epsilon(ledger) == pytest.approx(_uninterrupted_epsilon(K),
                                           rel=1e-9)


def _without_ledger(K, model, tmp_path):
  """A fresh private model with ``model``'s weights and wrapped optimizer
  but not its ledger (as a checkpoint written without it)."""
  # Not ``model=model``: a model's checkpoint includes its optimizer.
  path = tf.train.Checkpoint(
      weights=list(model.weights),
      inner=model.optimizer.inner_optimizer).save(str(tmp_path / "no_ledger"))
  loaded = _compiled(K)
  loaded.optimizer.build(loaded.trainable_variables)
  tf.train.Checkpoint(weights=list(loaded.weights),
                      inner=loaded.optimizer.inner_optimizer).restore(
                          path).assert_consumed()
  return loaded


def _stripped_keras3_weights(K, model, tmp_path):
  """A fresh private model loaded from a ``.weights.h5`` file whose DP state
  was deleted (as written by a tf_dp version that did not save it)."""
  import h5py  # pylint: disable=g-import-not-at-top
  path = str(tmp_path / "m.weights.h5")
  model.save_weights(path)
  with h5py.File(path, "r+") as f:
    stripped = []
    f.visit(lambda name: stripped.append(name)
            if os.path.basename(name).startswith("tf_dp_") else None)
    assert stripped
    for name in stripped:
      del f[name]
  loaded = _compiled(K)
  loaded.load_weights(path)
  return loaded


def _keras3_legacy_h5(K, model, tmp_path):
  """Keras 3's legacy ``.h5`` format drops the optimizer's state; the
  optimizer's config still says how many lots were applied."""
  path = str(tmp_path / "m.h5")
  model.save(path)
  return tf_dp.keras.make_private(K.models.load_model(path))


LOSSES = {"checkpoint": _without_ledger,
          "keras3_weights": _stripped_keras3_weights,
          "keras3_legacy_h5": _keras3_legacy_h5}


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("loss", sorted(LOSSES))
def test_lost_ledger_refuses_to_continue(K, loss, tmp_path):
  if loss.startswith("keras3") and not _is_keras3(K):
    pytest.skip("Keras 3 only")
  model = _trained(K)
  loaded = LOSSES[loss](K, model, tmp_path)
  before = [v.numpy() for v in loaded.trainable_variables]
  iterations = int(loaded.optimizer.iterations.numpy())
  with pytest.raises(ValueError, match=r"applied 8 lots .* records only 0"
                     r".*ledger=tf_dp\.PrivacyLedger\.from_dict"):
    _fit(loaded, 1)
  for old, variable in zip(before, loaded.trainable_variables):
    np.testing.assert_array_equal(old, variable.numpy())  # Nothing applied.
  assert int(loaded.optimizer.iterations.numpy()) == iterations


@pytest.mark.parametrize("K", KERAS)
def test_fresh_optimizer_with_the_earlier_ledger_continues(K, tmp_path):
  """The fix the refusal suggests: continue the earlier ledger explicitly."""
  model = _trained(K)
  earlier = model.optimizer.ledger.to_dict()
  loaded = _compiled(K, ledger=tf_dp.PrivacyLedger.from_dict(
      earlier, max_samples=100))
  loaded.set_weights(model.get_weights())
  _fit(loaded, 2)
  assert len(loaded.optimizer.ledger.to_dict()["samples"]) == (
      4 * LOTS_PER_EPOCH)
  assert _epsilon(loaded.optimizer.ledger) == pytest.approx(
      _uninterrupted_epsilon(K), rel=1e-9)


def _adam_model(K, legacy=False):
  adam = K.optimizers.legacy.Adam if legacy else K.optimizers.Adam
  model = tf_dp.keras.make_private(helpers.build_model(K, "dense"))
  model.compile(optimizer=tf_dp.DPOptimizer(
      adam(0.01), l2_norm_clip=1.0, noise_multiplier=1.3,
      population_size=N), loss=K.losses.SparseCategoricalCrossentropy(
          from_logits=True))
  return model


SLOT_CASES = [pytest.param(K.values[0], fmt, legacy,
                           id=f"{K.id}-{fmt}{'-legacy' if legacy else ''}")
              for K in KERAS
              for fmt, legacy in ((("keras", False), ("weights", False))
                                  if _is_keras3(K.values[0])
                                  else (("h5", False), ("h5", True)))]


@pytest.mark.parametrize("K,fmt,legacy", SLOT_CASES)
def test_wrapped_optimizer_slots_travel_with_the_ledger(K, fmt, legacy,
                                                        tmp_path):
  """Adam's moments are saved beside the ledger and loaded in their place
  (Keras 2's legacy Adam too; into a Keras 3 optimizer not built yet, they
  are assigned when the first step builds it)."""
  model = _adam_model(K, legacy)
  _fit(model, 1)
  loaded = _save_and_load(K, fmt, model, tmp_path,
                          make=lambda K: _adam_model(K, legacy))
  # What the first training step does before it updates anything.
  loaded.optimizer.ensure_built(loaded.trainable_variables, loaded)
  # pylint: disable=protected-access
  saved = [v.numpy() for v in model.optimizer._keras_variables()]
  restored = [v.numpy() for v in loaded.optimizer._keras_variables()]
  # pylint: enable=protected-access
  assert len(saved) == len(restored) > 4  # Step, rate and moments.
  for a, b in zip(saved, restored):
    np.testing.assert_array_equal(a, b)
  _fit(loaded, 1)
  assert int(loaded.optimizer.iterations.numpy()) == 2 * LOTS_PER_EPOCH
  assert len(loaded.optimizer.ledger.to_dict()["samples"]) == (
      2 * LOTS_PER_EPOCH)


@pytest.mark.parametrize("K", KERAS)
def test_saved_files_name_the_classes_by_their_homes(K, tmp_path):
  """A ``.keras`` file records the DP optimizer's registered name and module
  (Keras 2's loader imports that module in a process where the class is
  not registered yet), and a fresh process that only imported tf_dp loads a
  Keras 2 file."""
  path = _saved_after_one_epoch(K, tmp_path)
  with zipfile.ZipFile(path) as archive:
    saved = json.loads(archive.read("config.json"))["compile_config"][
        "optimizer"]
  suffix = "3" if _is_keras3(K) else "2"
  assert saved["registered_name"] == f"tf_dp>DPOptimizerKeras{suffix}"
  assert saved["module"] == (
      f"tf_dp.keras.flavor_classes.keras{suffix}_optimizer")
  if _is_keras3(K):
    return  # Keras 3 finds classes by their registered name only.
  assert _load_in_a_fresh_process(K, path, "import tf_dp")[0] == (
      "DPOptimizerKeras2")


@pytest.mark.parametrize("K", KERAS)
def test_a_fresh_process_loads_a_saved_model_after_importing_tf_dp_keras(
    K, tmp_path):
  """The documented way: ``import tf_dp.keras``, then ``load_model(path)``,
  without ``custom_objects``; the file's DP optimizer comes back with the
  ledger of the epoch trained before the save, and one more epoch adds its
  lots to it."""
  path = _saved_after_one_epoch(K, tmp_path)
  assert _load_in_a_fresh_process(K, path, "import tf_dp.keras") == [
      f"DPOptimizerKeras{3 if _is_keras3(K) else 2}",
      str(2 * LOTS_PER_EPOCH)]


def _saved_after_one_epoch(K, tmp_path):
  model = _compiled(K)
  _fit(model, 1)
  path = str(tmp_path / "m.keras")
  model.save(path)
  np.savez(str(tmp_path / "data.npz"), *helpers.make_data("dense", N))
  return path


def _load_in_a_fresh_process(K, path, import_line):
  """``[optimizer class name, ledger samples after one more epoch]`` of
  ``K.models.load_model(path)`` in a new Python that ran ``import_line``
  first."""
  if _is_keras3(K):
    keras_import = "import keras as K"
  else:
    keras_import = textwrap.dedent("""\
        import importlib.util, os
        if importlib.util.find_spec("tf_keras") is not None:
          os.environ["TF_USE_LEGACY_KERAS"] = "1"
          import tf_keras as K
        else:
          import tensorflow as tf
          K = tf.keras""")
  data = os.path.join(os.path.dirname(path), "data.npz")
  code = "\n".join([keras_import, import_line, textwrap.dedent(f"""\
      import numpy as np
      import tf_dp
      model = K.models.load_model({path!r})
      print(type(model.optimizer).__name__)
      with np.load({data!r}) as data:
        x, y = data["arr_0"], data["arr_1"]
      model = tf_dp.keras.make_private(model)
      model.fit(x, y, batch_size={BATCH}, epochs=1, verbose=0)
      print(int(model.optimizer.ledger.sample_count.numpy()))""")])
  out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                       text=True, check=False)
  assert out.returncode == 0, out.stderr[-3000:]
  return out.stdout.strip().splitlines()[-2:]
