r"""What the privacy gate costs at the first step.

The gate (``tf_dp.keras.privacy_gate``) analyses the traced DP step every
time it is traced. This measures, for the README main job's MNIST CNN and a
small KerasHub BERT classifier (Keras 3, TF's defaults), the time of the
first ``fit`` step (tracing included) and the part of it spent in the gate's
analysis (labelling the graph and checking what the rules read), timed by
wrapping the two gate functions. Each model is built and measured in a
fresh subprocess, ``--rounds`` times; the median is printed.

  python benchmarks/gate_cost.py [--rounds 3]

The last line is ``gate_cost <model>=<gate s>/<first step s> ...``.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

MODELS = ("mnist_cnn", "bert_tiny")


def _model(name):
  """(model, x, y) for one of MODELS."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  keras = tf.keras
  rng = np.random.default_rng(0)
  if name == "mnist_cnn":
    layers = keras.layers
    model = keras.Sequential([
        keras.Input((28, 28, 1)),
        layers.Conv2D(16, 8, strides=2, padding="same", activation="relu"),
        layers.MaxPool2D(2, 1),
        layers.Conv2D(32, 4, strides=2, padding="valid", activation="relu"),
        layers.MaxPool2D(2, 1), layers.Flatten(),
        layers.Dense(32, activation="relu"), layers.Dense(10)])
    x = rng.normal(size=(512, 28, 28, 1)).astype("float32")
    return model, x, rng.integers(0, 10, 512)
  import keras_hub  # pylint: disable=g-import-not-at-top
  backbone = keras_hub.models.BertBackbone(
      vocabulary_size=256, num_layers=2, num_heads=2, hidden_dim=64,
      intermediate_dim=128, max_sequence_length=32)
  model = keras_hub.models.BertTextClassifier(backbone, num_classes=2,
                                              preprocessor=None)
  x = {"token_ids": rng.integers(1, 256, (512, 32)).astype("int32"),
       "segment_ids": np.zeros((512, 32), "int32"),
       "padding_mask": np.ones((512, 32), "int32")}
  return model, x, rng.integers(0, 2, 512)


def measure(name):
  """One round in this process: ``{"gate": s, "first_step": s}``."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tf_dp  # pylint: disable=g-import-not-at-top
  from tf_dp.keras import privacy_gate  # pylint: disable=g-import-not-at-top
  spent = [0.0]

  def timed(fn):
    def wrapper(*args, **kwargs):
      start = time.perf_counter()
      try:
        return fn(*args, **kwargs)
      finally:
        spent[0] += time.perf_counter() - start
    return wrapper

  privacy_gate.analyse_fast_step = timed(privacy_gate.analyse_fast_step)
  privacy_gate.prove_fast_step = timed(privacy_gate.prove_fast_step)
  model, x, y = _model(name)
  model = tf_dp.keras.make_private(model)
  model.compile(
      optimizer=tf_dp.DPOptimizer(tf.keras.optimizers.SGD(0.1), 1.0, 1.1,
                                  population_size=512),
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  start = time.perf_counter()
  model.fit(x, y, batch_size=256, epochs=1, steps_per_epoch=1, verbose=0)
  return {"gate": spent[0], "first_step": time.perf_counter() - start}


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("--one", choices=MODELS)
  args = parser.parse_args()
  if args.one:
    print(json.dumps(measure(args.one)))
    return
  summary = []
  for name in MODELS:
    runs = []
    for _ in range(args.rounds):
      out = subprocess.run([sys.executable, __file__, "--one", name],
                           capture_output=True, text=True, check=True)
      runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    gate = statistics.median(r["gate"] for r in runs)
    first = statistics.median(r["first_step"] for r in runs)
    print(f"{name}: gate {gate:.2f} s of a first step of {first:.2f} s "
          f"({100 * gate / first:.0f} %), median of {args.rounds}")
    summary.append(f"{name}={gate:.2f}/{first:.2f}")
  print("gate_cost " + " ".join(summary))


if __name__ == "__main__":
  main()
