"""tf_dp runs on TensorFlow's default settings: nothing turns oneDNN off.

Turning oneDNN off (the TF_ENABLE_... environment flag set to 0) slows Keras 3 convolutions ~9x on CPU and breaks
grouped convolutions; tf_dp avoids the TF 2.21 oneDNN matmul bug in its own
code instead (fast rules for EinsumDense / MultiHeadAttention).
"""

import os
import pathlib

import numpy as np
import pytest

from tests.keras import helpers

ROOT = pathlib.Path(__file__).resolve().parents[2]
FLAG = "TF_ENABLE_" + "ONE" + "DNN_OPTS"  # in parts: this file must pass too


def test_no_script_benchmark_or_module_sets_the_flag():
  offenders = []
  for folder in ("scripts", "benchmarks", "tf_dp", "tests", "tutorials"):
    for path in (ROOT / folder).rglob("*"):
      if path.suffix in (".py", ".sh", ".ipynb") and path.is_file():
        if FLAG in path.read_text(errors="ignore"):
          offenders.append(str(path.relative_to(ROOT)))
  assert not offenders, offenders


def test_the_test_process_runs_with_defaults():
  assert os.environ.get(FLAG) in (None, "1")


@pytest.mark.parametrize("K", helpers.keras_modules())
def test_grouped_convolution_trains_privately(K):
  """Grouped convolutions have no Eigen kernel: they need oneDNN (on)."""
  model = K.Sequential([
      K.layers.Input((6, 6, 4)),
      K.layers.Conv2D(4, 3, groups=2, activation="relu"),
      K.layers.GlobalAveragePooling2D(), K.layers.Dense(3)])
  model = helpers.compile_dp(K, model, population_size=64)
  rng = np.random.default_rng(0)
  x = rng.normal(size=(64, 6, 6, 4)).astype("float32")
  y = rng.integers(0, 3, 64).astype("int32")
  history = model.fit(x, y, batch_size=16, epochs=2, verbose=0).history
  assert np.all(np.isfinite(history["loss"]))
