"""Flavour detection and dispatch: ``tf_dp.keras.backend``."""

import importlib.util
import subprocess
import sys
import textwrap
import types

import pytest

from tf_dp.keras import backend
from tf_dp.keras.backend import keras2
from tf_dp.keras.backend import keras3
from tests.keras import helpers

KERAS = helpers.keras_modules()

# The adapter interface, as the package docstring lists it.
INTERFACE = {
    "NAME", "module", "imported_module", "defines", "all_layers", "sublayers",
    "unpack_x_y_sample_weight", "batch_norm_classes",
    "pfor_hazard_layer_classes", "make_randomness_per_example", "get_loss",
    "get_optimizer", "loss_container", "build_loss_container",
    "batch_of_one_loss", "output_mask", "set_output_mask",
    "added_loss_terms", "weight_regularization_terms", "reported_loss",
    "CallbackHooks", "clone_model", "group_normalization",
    "SHUFFLE_BATCH_KEEPS_BATCH_ORDER", "prepare_fit_across_workers",
    "logs_across_workers",
}


def _public(module):
  return {name for name, value in vars(module).items()
          if not name.startswith("_")
          and not isinstance(value, types.ModuleType)}


def test_both_adapters_expose_exactly_the_documented_interface():
  assert _public(keras3) == INTERFACE
  assert _public(keras2) == INTERFACE
  for name in INTERFACE:
    assert name in backend.__doc__, name
  assert (keras3.NAME, keras2.NAME) == backend.FLAVORS == ("keras3", "keras2")


def _adapter_of_module(K):
  keras = backend.keras3_module()
  return keras3 if keras is not None and K is keras else keras2


@pytest.mark.parametrize("K", KERAS)
def test_for_object_finds_the_flavour_of_models_layers_and_optimizers(K):
  adapter = _adapter_of_module(K)
  model = helpers.build_model(K, "dense")

  class MyLayer(K.layers.Dense):  # defined outside Keras: its bases decide.
    pass

  for obj in (model, model.layers[0], MyLayer(2), K.optimizers.SGD(0.1)):
    assert backend.for_object(obj) is adapter
    assert backend.flavor_of(obj) == adapter.NAME
  # The same Keras (tf.keras on TF 2.15 is a lazy loader: compare classes).
  assert adapter.module().layers.Layer is K.layers.Layer
  assert backend.module_for(adapter.NAME).layers.Layer is K.layers.Layer
  assert backend.for_flavor(adapter.NAME) is adapter


def test_for_object_refuses_what_is_not_keras():
  with pytest.raises(TypeError, match="is not a Keras object"):
    backend.for_object(object())


def test_for_flavor_names_the_choices():
  with pytest.raises(ValueError, match="keras3"):
    backend.for_flavor("keras4")


def test_installed_and_default_follow_what_is_installed():
  names = [a.NAME for a in backend.installed()]
  assert names == [p.id for p in KERAS]
  expected = "keras3" if backend.keras3_module() is not None else "keras2"
  assert backend.default().NAME == expected


def _run(code):
  return subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                        capture_output=True, text=True, check=False)


def test_importing_tf_dp_keras_imports_no_keras_package():
  """The adapters import their Keras on first use: tf_dp.keras imports with
  either flavour alone (here: neither Keras package is imported by it)."""
  out = _run("""
      import sys
      import tensorflow  # TF itself may load its own Keras lazily.
      before = {m for m in sys.modules if m.split('.')[0] in ('keras', 'tf_keras')}
      import tf_dp.keras, tf_dp.keras.backend
      after = {m for m in sys.modules if m.split('.')[0] in ('keras', 'tf_keras')}
      print(sorted(after - before))
  """)
  assert out.returncode == 0, out.stderr
  assert out.stdout.strip().splitlines()[-1] == "[]"


def test_tf_dp_keras_trains_without_tf_keras():
  """With ``tf_keras`` hidden (TF >= 2.16 installs Keras 3 only; TF 2.15 has
  Keras 2 only), tf_dp.keras imports, finds one flavour, and trains."""
  hidden = "tf_keras"
  expected = ["keras3"] if backend.keras3_module() is not None else [
      "keras2"]
  out = _run(f"""
      import sys

      class _Blocker:
        def find_spec(self, name, path=None, target=None):
          if name.split('.')[0] == {hidden!r}:
            raise ImportError('blocked for the test: ' + name)
          return None

      sys.meta_path.insert(0, _Blocker())
      import numpy as np
      import tf_dp
      from tf_dp.keras import backend
      K = backend.default().module()
      model = tf_dp.keras.make_private(K.Sequential(
          [K.layers.Input((3,)), K.layers.Dense(2)]))
      model.compile(optimizer=tf_dp.DPOptimizer(
          K.optimizers.SGD(0.1), 1.0, 1.0), loss="mse")
      model.fit(np.ones((4, 3), "float32"), np.ones((4, 2), "float32"),
                batch_size=2, verbose=0)
      print([a.NAME for a in backend.installed()],
            len(model.optimizer.ledger.to_dict()["samples"]))
  """)
  assert out.returncode == 0, out.stderr[-3000:]
  assert out.stdout.strip().splitlines()[-1] == f"{expected} 2"


@pytest.mark.skipif(
    backend.keras3_module() is None
    or importlib.util.find_spec("tf_keras") is None,
    reason="needs Keras 3 and tf_keras installed side by side")
def test_training_keras3_never_imports_tf_keras():
  """A Keras 3 model trains through the fast path without importing
  tf_keras (about 15 MiB of resident memory for nothing): built-in rules
  are registered per flavour once it is imported, and tf_keras's are when
  it is."""
  out = _run("""
      import sys
      import numpy as np
      import keras
      import tf_dp
      from tf_dp.keras.fast import rules
      model = tf_dp.keras.make_private(keras.Sequential(
          [keras.layers.Input((3,)), keras.layers.Dense(2)]))
      model.compile(optimizer=tf_dp.DPOptimizer(
          keras.optimizers.SGD(0.1), 1.0, 1.0, per_example_method="fast"),
          loss="mse")
      model.fit(np.ones((4, 3), "float32"), np.ones((4, 2), "float32"),
                batch_size=2, verbose=0)
      print("tf_keras" in sys.modules)
      import tf_keras
      print(type(rules.rule_for(tf_keras.layers.Dense(2))).__name__)
  """)
  assert out.returncode == 0, out.stderr[-3000:]
  assert out.stdout.strip().splitlines()[-2:] == ["False", "DenseRule"]
