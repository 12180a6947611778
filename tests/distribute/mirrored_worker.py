"""Runs DP training under a distribution strategy (in a subprocess).

Prints one JSON line with the measured quantities; see
test_mirrored_strategy.py. Usage:

  mirrored_worker.py keras3|keras2 exact|noise           # MirroredStrategy,
                                                         # 2 logical CPUs
  mirrored_worker.py keras3|keras2 one_replica|microbatches|neighbour
      # one logical CPU (one_replica), or 2 with num_microbatches=4
      # (microbatches) or one example replaced, noise 0 (neighbour)
  mirrored_worker.py keras3|keras2 exact|noise|poisson PORT0 PORT1 INDEX
      # MultiWorkerMirroredStrategy: worker INDEX of 2 on 127.0.0.1
"""

import json
import os
import sys

import importlib.util  # pylint: disable=g-import-not-at-top

flavor, mode = sys.argv[1], sys.argv[2]
if flavor == "keras2" and importlib.util.find_spec("tf_keras") is not None:
  os.environ["TF_USE_LEGACY_KERAS"] = "1"  # TF >= 2.16: tf.keras is Keras 3.

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

MULTI_WORKER = len(sys.argv) > 3
if MULTI_WORKER:
  ports, index = sys.argv[3:5], int(sys.argv[5])
  os.environ["TF_CONFIG"] = json.dumps({
      "cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
      "task": {"type": "worker", "index": index}})
else:
  cpu = tf.config.list_physical_devices("CPU")[0]
  tf.config.set_logical_device_configuration(
      cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

import tf_dp  # pylint: disable=g-import-not-at-top,wrong-import-position
from tf_dp.keras import backend  # pylint: disable=g-import-not-at-top
from tests.keras import helpers  # pylint: disable=g-import-not-at-top

K = backend.module_for(flavor)
if MULTI_WORKER:
  strategy = tf.distribute.MultiWorkerMirroredStrategy()
elif mode.startswith("one_replica"):
  strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
else:
  strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])


def fit_data(x, y, batch):
  """Multi-worker training reads a tf.data pipeline (global batches, sharded
  by Keras across workers); single-host training takes the arrays."""
  if not MULTI_WORKER:
    return (x, y, batch)
  return (tf.data.Dataset.from_tensor_slices((x, y)).batch(batch), None,
          None)


def one_step(x, y, clip, **dp_kwargs):
  """Weights before and after one noise-free DP step on the whole batch."""
  with strategy.scope():
    model = tf_dp.keras.make_private(helpers.build_model(K, "dense"))
    model.compile(optimizer=tf_dp.DPOptimizer(
        K.optimizers.SGD(1.0), l2_norm_clip=clip, noise_multiplier=0.0,
        population_size=len(x), **dp_kwargs),
        loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  before = [np.asarray(v.numpy(), np.float64)
            for v in model.trainable_variables]
  model.fit(*fit_data(x, y, len(x)), epochs=1, verbose=0, shuffle=False)
  after = [np.asarray(v.numpy(), np.float64)
           for v in model.trainable_variables]
  return model, before, after


def run(mode):
  """One case's results (a dict) on this process's strategy."""
  out = {"replicas": strategy.num_replicas_in_sync}
  if mode in ("exact", "one_replica", "microbatches"):
    x, y = helpers.make_data("dense", 8, seed=1)
    microbatch = 2 if mode == "microbatches" else 1
    with strategy.scope():
      reference_model = helpers.build_model(K, "dense")
    expected = helpers.reference_update(reference_model, x, y, clip=0.05,
                                        lr=1.0, microbatch=microbatch)
    model, _, got = one_step(
        x, y, 0.05, num_microbatches=4 if mode == "microbatches" else None)
    out["max_abs_error"] = float(max(np.max(np.abs(a - b))
                                     for a, b in zip(expected, got)))
    sample = model.optimizer.ledger.to_dict()["samples"][0]
    out["examples_per_record"] = sample.get("examples_per_record")
  elif mode == "neighbour":
    # Replace one example; with noise 0 and SGD(1), batch x (update change)
    # is the change of the clipped sum: at most 2C.
    x, y = helpers.make_data("dense", 8, seed=1)
    x2, y2 = x.copy(), y.copy()
    x2[5], y2[5] = 10.0 * x[0], (y[0] + 1) % 3
    clip = 0.01
    _, before, after = one_step(x, y, clip)
    _, before2, after2 = one_step(x2, y2, clip)
    change = np.sqrt(sum(np.sum(((a - b) - (a2 - b2)) ** 2) for a, b, a2, b2
                         in zip(after, before, after2, before2))) * len(x)
    out["sum_change"] = float(change)
    out["bound"] = 2 * clip
  elif mode == "poisson":
    # Poisson lots over 2 workers: refused before any step.
    x, y = helpers.make_data("dense", 40, seed=1)
    with strategy.scope():
      model = tf_dp.keras.make_private(helpers.build_model(K, "dense"))
      model.compile(optimizer=tf_dp.DPOptimizer(
          K.optimizers.SGD(1.0), l2_norm_clip=1.0, noise_multiplier=1.0,
          population_size=len(x), sampling="poisson", sampling_probability=0.25),
          loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
    try:
      model.fit(tf_dp.data.poisson_sampled_batches(x, y, 0.25, 4), verbose=0)
      out["refusal"] = None
    except ValueError as e:
      out["refusal"] = str(e)
    out["ledger_samples"] = int(model.optimizer.ledger.sample_count.numpy())
  else:
    n, batch, clip, z = 400, 10, 2.0, 1.5
    x = np.zeros((n, 6), "float32")
    y = np.zeros((n,), "int32")
    with strategy.scope():
      model = tf_dp.keras.make_private(helpers.build_model(K, "dense"))
      model.compile(optimizer=tf_dp.DPOptimizer(
          K.optimizers.SGD(1.0), l2_norm_clip=clip, noise_multiplier=z,
          population_size=n),
          loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
    kernel = model.trainable_variables[0]
    deltas = []

    class Record(K.callbacks.Callback):

      def on_train_batch_begin(self, batch, logs=None):
        self.before = kernel.numpy().copy()

      def on_train_batch_end(self, batch, logs=None):
        deltas.append((kernel.numpy() - self.before).ravel().tolist())

    model.fit(*fit_data(x, y, batch), epochs=1, verbose=0,
              callbacks=[Record()])
    out["deltas"] = deltas
    out["ledger_samples"] = len(model.optimizer.ledger.to_dict()["samples"])
    out["expected_stddev"] = clip * z / batch
    # Keras 3 variables wrap a tf.Variable in `.value`; Keras 2's are one.
    tf_variable = kernel if isinstance(kernel, tf.Variable) else kernel.value
    replica_values = [np.asarray(v) for v in
                      strategy.experimental_local_results(tf_variable)]
    out["replica_copies"] = (strategy.num_replicas_in_sync if MULTI_WORKER
                             else len(replica_values))
    out["kernel"] = replica_values[0].ravel().tolist()
    out["replicas_equal"] = all(np.array_equal(replica_values[0], v)
                                for v in replica_values)
  return out


# Several cases (comma-separated) share one process and strategy.
print(json.dumps({m: run(m) for m in mode.split(",")}))
