r"""DP-SGD over several workers: step time against non-private training, and
the bytes each worker sends per step.

Each configuration starts W worker processes on 127.0.0.1
(``MultiWorkerMirroredStrategy``, TF_CONFIG; Keras 2 ``fit``, TensorFlow's
default settings) that train the 784-512-10 MLP of ``step_time.py`` on
MNIST-shaped data (synthetic pixels: only the shapes matter here), batch
256, in the same process both ways:

* plain: ``fit`` on a shuffled dataset of global batches of 256;
* DP: ``make_private`` + ``DPOptimizer`` (clip 1, noise 1.1), ``fit`` on
  ``poisson_sampled_batches`` (q = 256 / n; each worker redraws the global
  lots and reads its part: ``tf_dp.data.distribute_lots``).

Step time: per-batch wall time from a callback, median over the steps
after the first 10 (tracing). Bytes sent: the ``bytes_sent`` counters of
the worker's TCP sockets (``ss -tinp``) before and after the timed steps,
over the steps. The gradient is ``4 x parameters`` bytes; a ring
all-reduce over W workers sends ``2 (W - 1) / W`` of it per worker.

  python benchmarks/multi_worker.py            # W = 1 and 2, 60 steps
  python benchmarks/multi_worker.py --steps 30

On 2 cores the workers share the machine's cores, so absolute times say
little; the ratio DP / plain at each W and the traffic are the point.
"""

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time

N, BATCH, WARMUP = 16384, 256, 10


def _free_ports(count):
  sockets = [socket.socket() for _ in range(count)]
  for s in sockets:
    s.bind(("127.0.0.1", 0))
  ports = [s.getsockname()[1] for s in sockets]
  for s in sockets:
    s.close()
  return ports


def bytes_sent(pid):
  """Bytes sent so far on the TCP sockets of process ``pid`` (``ss``)."""
  out = subprocess.run(["ss", "-tinpH"], capture_output=True, text=True,
                       check=False).stdout
  total, owner = 0, False
  for line in out.splitlines():
    if not line.startswith((" ", "\t")):
      owner = f"pid={pid}," in line
      continue
    match = re.search(r"bytes_sent:(\d+)", line)
    if owner and match:
      total += int(match.group(1))
  return total


def worker(steps):
  """One worker's measurements (runs under TF_CONFIG)."""
  os.environ["TF_USE_LEGACY_KERAS"] = "1"
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
      __file__))))
  import tf_dp  # pylint: disable=g-import-not-at-top
  import tf_keras as keras  # pylint: disable=g-import-not-at-top

  strategy = tf.distribute.MultiWorkerMirroredStrategy()
  rng = np.random.default_rng(0)
  x = rng.random((N, 784), np.float32)
  y = rng.integers(0, 10, N).astype(np.int32)
  pid = os.getpid()

  def build():
    return keras.Sequential([keras.layers.Input((784,)),
                             keras.layers.Dense(512, activation="relu"),
                             keras.layers.Dense(10)])

  class Clock(keras.callbacks.Callback):

    def __init__(self):
      super().__init__()
      self.times, self.sent = [], []

    def on_train_batch_begin(self, batch, logs=None):
      if batch == WARMUP:
        self.sent.append(bytes_sent(pid))
      self.start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
      self.times.append(time.perf_counter() - self.start)

    def on_train_end(self, logs=None):
      self.sent.append(bytes_sent(pid))

  loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
  results = {}
  for name in ("plain", "dp"):
    with strategy.scope():
      model = build()
      if name == "dp":
        model = tf_dp.keras.make_private(model)
        optimizer = tf_dp.DPOptimizer(
            keras.optimizers.SGD(0.1), l2_norm_clip=1.0,
            noise_multiplier=1.1, population_size=N, sampling="poisson",
            sampling_probability=BATCH / N)
      else:
        optimizer = keras.optimizers.SGD(0.1)
      model.compile(optimizer=optimizer, loss=loss)
    if name == "dp":
      data = tf_dp.data.poisson_sampled_batches(x, y, BATCH / N, steps)
    else:
      data = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(
          N, seed=0).batch(BATCH).repeat().take(steps)
    clock = Clock()
    model.fit(data, epochs=1, steps_per_epoch=steps, verbose=0,
              callbacks=[clock])
    timed = len(clock.times) - WARMUP
    results[name] = {
        "step_ms": 1e3 * statistics.median(clock.times[WARMUP:]),
        "bytes_per_step": (clock.sent[-1] - clock.sent[0]) / max(timed, 1),
    }
  params = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
  results["gradient_bytes"] = 4 * params
  print(json.dumps(results))


def run(workers, steps):
  """The chief's measurements of a cluster of ``workers`` processes."""
  ports = _free_ports(workers)
  procs = []
  for index in range(workers):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", TF_CONFIG=json.dumps({
        "cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
        "task": {"type": "worker", "index": index}}))
    procs.append(subprocess.Popen(
        [sys.executable, __file__, "--worker", "--steps", str(steps)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
  outputs = [p.communicate() for p in procs]
  for p, (_, err) in zip(procs, outputs):
    if p.returncode:
      raise RuntimeError(err[-3000:])
  return json.loads(outputs[0][0].strip().splitlines()[-1])


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--steps", type=int, default=60)
  parser.add_argument("--worker", action="store_true")
  parser.add_argument("--workers", default="1,2")
  args = parser.parse_args()
  if args.worker:
    worker(args.steps)
    return
  print(f"MLP 784-512-10, batch {BATCH} (global), Keras 2 fit, "
        f"MultiWorkerMirroredStrategy on 127.0.0.1, {args.steps} steps "
        f"({WARMUP} warm-up)")
  print("workers | plain ms | DP ms | DP/plain | plain bytes/step | "
        "DP bytes/step | DP/plain bytes | ring all-reduce of the gradient")
  ratios = {}
  for w in (int(v) for v in args.workers.split(",")):
    r = run(w, args.steps)
    ring = 2 * (w - 1) / w * r["gradient_bytes"]
    ratio = r["dp"]["step_ms"] / r["plain"]["step_ms"]
    plain_bytes = r["plain"]["bytes_per_step"]
    byte_ratio = (r["dp"]["bytes_per_step"] / plain_bytes if plain_bytes
                  else float("nan"))
    ratios[w] = (ratio, byte_ratio)
    print(f"{w} | {r['plain']['step_ms']:.1f} | {r['dp']['step_ms']:.1f} | "
          f"{ratio:.2f} | {plain_bytes:.0f} | "
          f"{r['dp']['bytes_per_step']:.0f} | {byte_ratio:.3f} | {ring:.0f}")
  print("multi_worker " + " ".join(
      f"workers{w}_time_ratio={t:.2f} workers{w}_bytes_ratio={b:.3f}"
      for w, (t, b) in ratios.items()))


if __name__ == "__main__":
  main()
