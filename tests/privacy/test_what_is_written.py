"""Nothing secret is written by any save, export, checkpoint or weights API
of either Keras flavour, whatever the DP optimizer's configuration.

The secrets: the process's noise key; a correlated-noise run's history
(the last noises added: two consecutive files would give away a clipped
sum); an open lot's un-noised sums (gradients, private metrics' counts, DP
batch-norm statistics); and Keras's un-noised training metric totals. Each
(API, configuration) pair either writes files that hold none of them, read
back from the files (stored arrays and raw bytes:
tests/privacy/written_files.py), or is refused before anything secret is
written (Keras 3 opens its file before it asks the optimizer, and leaves the
model's weights in it) with a message naming a way that works, which is
then taken and checked the same way. Only a correlated-noise optimizer may
be refused. The rule is not a list of formats: it is kept where every
writer reaches state (tf_dp/keras/optimizer_state.py says where), so an API
missing here is covered too. One model per flavour and configuration is
trained and saved by every API in turn (the callbacks save during a
one-epoch fit).
"""

import contextlib
import re
import warnings
import zipfile

import h5py
import numpy as np
import pytest
import tensorflow as tf

import tf_dp
from tests.keras import helpers
from tests.keras.users import K_ROWS
from tests.keras.users import user_data
from tests.privacy import written_files
from tf_dp.analysis import matrix_factorization as mf
from tf_dp.dp_query import noise
from tf_dp.keras import backend

KERAS = helpers.keras_modules()
N, BATCH = 24, 8
Q = 2 * BATCH / N   # Poisson lots of 2 batches of about BATCH examples.
FITS = 4            # The first fit and one per callback API.
OPEN_LOT = dict(gradient_accumulation_steps=2, sampling="poisson",
                sampling_probability=Q)
CONFIGS = {
    "dp_sgd": {},
    "open_lot": OPEN_LOT,
    "noise_strategy": dict(noise_strategy=mf.banded_strategy(3 * FITS, 3),
                           max_passes=FITS),
    "user_lots": dict(privacy_unit="user", sampling="poisson",
                      sampling_probability=0.5, population_size=12,
                      max_examples_per_user=K_ROWS),
    "secure_mode": dict(secure_mode=True),
    "private_metrics": dict(OPEN_LOT, metrics_noise_stddev=1.0),
    "dp_batch_norm": OPEN_LOT,
}
# Which stack runs a configuration's Keras 2 case (--stack-share): these
# group names hash to tf221 and tf215 (tests/conftest.py). TF 2.21 runs
# every Keras 3 case, so it takes two Keras 2 cases (tf-keras 2.21, where
# the TF-format weights hole was found) and TF 2.15 the rest.
ON_TF_KERAS = pytest.mark.share_group("what is written: tf-keras")
ON_TF215 = pytest.mark.share_group("what is written: tf.keras 2.15")
CONFIG_CASES = [pytest.param(config, marks=ON_TF_KERAS if config in (
    "dp_sgd", "noise_strategy") else ON_TF215) for config in sorted(CONFIGS)]
# A refusal names one of these; the test takes it, and its file must be
# clean too.
WAYS = {
    r"model\.get_weights\(\)": lambda model, folder: np.savez(
        str(folder / "weights.npz"), *model.get_weights()),
}


def _is_keras3(K):
  return K is backend.keras3_module()


def _model(K, config):
  layers = [K.layers.Input((6,)), K.layers.Dense(5, activation="tanh")]
  if config == "dp_batch_norm":
    if _is_keras3(K):
      from tf_dp.keras import layers as dp_layers  # pylint: disable=g-import-not-at-top
    else:
      from tf_dp.keras import layers_keras2 as dp_layers  # pylint: disable=g-import-not-at-top
    layers.append(dp_layers.DPBatchNormalization(l2_norm_clip=2.0))
  model = tf_dp.keras.make_private(K.Sequential(layers + [K.layers.Dense(3)]))
  kwargs = dict(dict(population_size=N), **CONFIGS[config])
  model.compile(optimizer=tf_dp.DPOptimizer(
      K.optimizers.SGD(0.1), l2_norm_clip=1.0, noise_multiplier=1.1,
      **kwargs), loss=K.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=["accuracy"])
  return model


def _fit(model, config, callbacks=()):
  """One epoch; the open-lot configurations end it with a lot open (3
  batches in lots of 2)."""
  kwargs = dict(epochs=1, verbose=0, callbacks=list(callbacks))
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    if CONFIGS[config].get("gradient_accumulation_steps"):
      x, y = helpers.make_data("dense", N)
      lots = tf_dp.data.poisson_sampled_batches(x, y, Q, 2, seed=1,
                                                batches_per_lot=2)
      model.fit(tf_dp.data.declare_sampling(lots.take(3), "poisson", Q,
                                            batches_per_lot=2), **kwargs)
    elif config == "user_lots":
      x, y, ids = user_data()
      model.fit(tf_dp.data.poisson_sampled_users(x, y, ids, 0.5, 2, K_ROWS,
                                                 seed=1), **kwargs)
    else:
      x, y = helpers.make_data("dense", N)
      model.fit(x, y, batch_size=BATCH, shuffle=config != "noise_strategy",
                **kwargs)


def secrets(model):
  """``{name: (kind, value)}`` of what no file may hold, read from memory
  now (``written_files.leaks``)."""
  engine = model.optimizer.dp_engine
  out = {f"key {i}": ("bytes", key.key.numpy().tobytes())
         for i, key in enumerate(noise._KEYS.values())}  # pylint: disable=protected-access
  if engine.lot_state is not None and int(engine.batches_in_lot.numpy()):
    for i, part in enumerate(tf.nest.flatten(engine.lot_state)):
      out[f"open lot sum {i}"] = ("array", np.asarray(part))
  for part, state in engine.global_state.items():
    for i, leaf in enumerate(tf.nest.flatten(getattr(state, "history", ()))):
      out[f"history {part} {i}"] = ("array", np.asarray(leaf))
  for metric in model.metrics:
    for variable in metric.variables:
      value = float(np.asarray(variable))
      if "total" in variable.name and value != round(value):
        out[f"metric total {metric.name}"] = ("scalar", value)
  return out


class _Interrupt(Exception):
  """Stops a fit after its first epoch's callbacks (BackupAndRestore
  deletes its backup when training ends)."""


def _callback_api(make_callback, interrupt=False):
  """Saves by a callback of a one-epoch fit; ``recorded`` gets the secrets
  at the epoch's end, when it saves."""

  def save(K, model, config, folder, recorded):

    class Recorder(K.callbacks.Callback):

      def on_epoch_end(self, epoch, logs=None):
        recorded.update(secrets(self.model))

    class Interrupter(K.callbacks.Callback):

      def on_epoch_end(self, epoch, logs=None):
        raise _Interrupt()

    with contextlib.suppress(_Interrupt):
      _fit(model, config, [Recorder(), make_callback(K, folder)] +
           ([Interrupter()] if interrupt else []))
  return save


def _direct_api(write):
  """Saves by a call after the fit, with Keras's metric totals filled
  again (an earlier save reset them): an evaluation on the private
  examples, the totals a model holds after ``fit(validation_data=...)``."""

  def save(K, model, config, folder, recorded):
    del K, config
    x, y = helpers.make_data("dense", N)
    model.evaluate(x, y, batch_size=BATCH, verbose=0)
    recorded.update(secrets(model))
    write(model, folder)
  return save


def _saved(call, path):
  call(str(path))


def _checkpoint(model, folder):
  tf.train.Checkpoint(model=model, optimizer=model.optimizer).write(
      str(folder / "ckpt"))


COMMON_APIS = {
    "tf.saved_model.save": _direct_api(lambda m, d: _saved(
        lambda p: tf.saved_model.save(m, p), d / "saved_model")),
    "tf.train.Checkpoint": _direct_api(_checkpoint),
}
KERAS3_APIS = {
    "model.save(.keras)": _direct_api(
        lambda m, d: _saved(m.save, d / "m.keras")),
    "save_weights(.weights.h5)": _direct_api(
        lambda m, d: _saved(m.save_weights, d / "m.weights.h5")),
    "model.export": _direct_api(lambda m, d: _saved(m.export, d / "export")),
    "ModelCheckpoint(save_weights_only=True)": _callback_api(
        lambda K, d: K.callbacks.ModelCheckpoint(
            str(d / "mc.weights.h5"), save_weights_only=True)),
    "ModelCheckpoint(save_weights_only=False)": _callback_api(
        lambda K, d: K.callbacks.ModelCheckpoint(str(d / "mc.keras"))),
    "BackupAndRestore": _callback_api(
        lambda K, d: K.callbacks.BackupAndRestore(str(d / "backup")),
        interrupt=True),
}
KERAS2_APIS = {
    "model.save(SavedModel)": _direct_api(lambda m, d: _saved(
        lambda p: m.save(p, save_format="tf"), d / "saved")),
    "model.save(.h5)": _direct_api(lambda m, d: _saved(m.save, d / "m.h5")),
    "model.save(.keras)": _direct_api(
        lambda m, d: _saved(m.save, d / "m.keras")),
    "save_weights(TF format)": _direct_api(
        lambda m, d: _saved(m.save_weights, d / "weights")),
    "save_weights(.h5)": _direct_api(
        lambda m, d: _saved(m.save_weights, d / "w.h5")),
    "ModelCheckpoint(save_weights_only=True)": _callback_api(
        lambda K, d: K.callbacks.ModelCheckpoint(
            str(d / "mcw"), save_weights_only=True)),
    "ModelCheckpoint(save_weights_only=False)": _callback_api(
        lambda K, d: K.callbacks.ModelCheckpoint(str(d / "mc"))),
    "BackupAndRestore": _callback_api(
        lambda K, d: K.callbacks.BackupAndRestore(str(d / "backup")),
        interrupt=True),
}


def _apis(K):
  return dict(COMMON_APIS, **(KERAS3_APIS if _is_keras3(K) else KERAS2_APIS))


def _refusal_problems(error, model, folder, recorded):
  """What is wrong with a refusal: a secret in what the API wrote before
  refusing (Keras 3 opens its file before it asks the optimizer for its
  state, and leaves the model's weights in it), or no way named that
  works."""
  problems = []
  leaked = written_files.leaks(written_files.Written(str(folder)), recorded)
  if leaked:
    problems.append(f"wrote {leaked} before refusing")
  ways = [way for pattern, way in WAYS.items()
          if re.search(pattern, str(error))]
  if not ways:
    problems.append(f"names no way that works: {error}")
  for way in ways:
    way_folder = folder / "way"
    way_folder.mkdir()
    way(model, way_folder)
    leaked = written_files.leaks(written_files.Written(str(way_folder)),
                                 secrets(model))
    if leaked:
      problems.append(f"the way it names writes {leaked}")
  return problems


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("config", CONFIG_CASES)
def test_every_api_writes_no_secret_or_refuses_first(K, config, tmp_path):
  model = _model(K, config)
  _fit(model, config)
  kinds_seen, problems, refused = set(), [], []
  for api, save in _apis(K).items():
    folder = tmp_path / re.sub(r"\W+", "_", api)
    folder.mkdir()
    recorded = {}
    try:
      save(K, model, config, folder, recorded)
    except (ValueError, RuntimeError) as error:   # PrivacyError included.
      refused.append(api)
      problems += [f"{api}: {p}" for p in _refusal_problems(
          error, model, folder, recorded)]
      continue
    written = written_files.Written(str(folder))
    assert written.arrays, f"{api} wrote no array"
    kinds = {name.split(" ")[0] for name in recorded}
    # Every save had a key and metric totals to write (the test can fail).
    assert {"key", "metric"} <= kinds, (api, kinds)
    kinds_seen |= kinds
    leaked = written_files.leaks(written, recorded)
    if leaked:
      problems.append(f"{api} wrote {leaked}")
  assert not problems, "\n".join(problems)
  # Only a correlated-noise optimizer is refused: its record cannot be
  # saved in a Keras file (tf_dp.keras.optimizer_state.export_state).
  assert not refused or config == "noise_strategy", refused
  # An open lot and a noise history were there to be written too.
  expected = ({"open"} if CONFIGS[config].get("gradient_accumulation_steps")
              else set()) | (
                  {"history"} if config == "noise_strategy" else set())
  assert expected <= kinds_seen, (expected, kinds_seen)


def test_the_reader_finds_each_kind_of_secret_in_each_kind_of_file(
    tmp_path):
  """The detector can fail: each secret is found in a TF checkpoint, an
  HDF5 file inside a zip (a '.keras' file) and an '.npz', and not in a
  file without it."""
  rng = np.random.default_rng(0)
  key = np.array([0x1234567890ABCDEF, 0x0FEDCBA987654321], np.int64)
  history = rng.normal(size=(2, 5)).astype(np.float32)
  total = np.float32(25.126)
  found = {"key": ("bytes", key.tobytes()), "history": ("array", history),
           "metric total": ("scalar", float(total))}
  tf.train.Checkpoint(k=tf.Variable(key), h=tf.Variable(history),
                      t=tf.Variable(total)).write(str(tmp_path / "ck" / "c"))
  with h5py.File(tmp_path / "w.h5", "w") as f:
    for name, value in (("k", key), ("h", history), ("t", total)):
      f[name] = value
  (tmp_path / "zip").mkdir()
  with zipfile.ZipFile(tmp_path / "zip" / "m.keras", "w",
                       zipfile.ZIP_DEFLATED) as archive:
    archive.write(tmp_path / "w.h5", "model.weights.h5")
  (tmp_path / "npz").mkdir()
  np.savez(tmp_path / "npz" / "w.npz", key, history, total)
  for folder in ("ck", "zip", "npz"):
    written = written_files.Written(str(tmp_path / folder))
    assert sorted(written_files.leaks(written, found)) == sorted(found), folder
  (tmp_path / "clean").mkdir()
  np.savez(tmp_path / "clean" / "w.npz", history + 1.0, total + 1.0)
  assert not written_files.leaks(
      written_files.Written(str(tmp_path / "clean")), found)
