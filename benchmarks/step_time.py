r"""Step time and memory of DP-SGD against non-private training, as users
get them: TensorFlow's default settings, ``model.fit``, Keras 3.

Models: the MNIST CNN of the TF Privacy tutorial, a 784-512-10 MLP and a
small transformer classifier (Embedding, 2 x [MultiHeadAttention,
LayerNormalization, Dense] on token sequences of length 64); clip 1.0,
noise 1.1, SGD, ``make_private`` + ``tf_dp.DPOptimizer`` (default
``per_example_method="auto"``: the fast path).

Step time: ``model.fit`` over an in-memory dataset, timed per epoch by a
callback (steps per epoch fixed, first epoch dropped: tracing), plain and
DP models built in the same process and measured alternately (which side
runs first alternates too); the median over rounds of each round's best
epoch (the machine may be shared: load then slows both sides alike). Peak memory: growth of the
resident set (CPU) or TF's peak allocator statistics (GPU), in a fresh
subprocess per configuration. The last line is

  step_time_ratio cnn=<x> mlp=<y> transformer=<z> memory=<m>

(batch 256, the better of XLA on/off for DP where both are measured).

  python benchmarks/step_time.py            # full table + batch scaling
  python benchmarks/step_time.py --quick    # fewer repeats, no scaling
  python benchmarks/step_time.py --xla      # CPU: also jit_compile=True
On a GPU, XLA on and off and batches 256 and 1024 are measured by default.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

KINDS = ("cnn", "mlp", "transformer")
TARGETS = {"cnn": 1.5, "mlp": 1.5, "transformer": 2.0, "memory": 1.5}
SEQ_LEN, VOCAB, WIDTH = 64, 1000, 64


def build(keras, kind):
  """The benchmark model of the given kind (uncompiled)."""
  layers = keras.layers
  if kind == "cnn":
    return keras.Sequential([
        layers.Input((28, 28, 1)),
        layers.Conv2D(16, 8, strides=2, padding="same", activation="relu"),
        layers.MaxPool2D(2, 1),
        layers.Conv2D(32, 4, strides=2, padding="valid", activation="relu"),
        layers.MaxPool2D(2, 1), layers.Flatten(),
        layers.Dense(32, activation="relu"), layers.Dense(10)])
  if kind == "mlp":
    return keras.Sequential([layers.Input((784,)),
                             layers.Dense(512, activation="relu"),
                             layers.Dense(10)])
  inputs = layers.Input((SEQ_LEN,), dtype="int32")
  h = layers.Embedding(VOCAB, WIDTH)(inputs)
  for _ in range(2):
    h = layers.LayerNormalization()(
        h + layers.MultiHeadAttention(4, WIDTH // 4)(h, h))
    h = layers.Dense(WIDTH, activation="relu")(h)
  h = layers.GlobalAveragePooling1D()(h)
  return keras.Model(inputs, layers.Dense(2)(h))


def batch_data(kind, batch):
  import numpy as np  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  if kind == "cnn":
    x = rng.random((batch, 28, 28, 1), dtype=np.float32)
  elif kind == "mlp":
    x = rng.random((batch, 784), dtype=np.float32)
  else:
    x = rng.integers(0, VOCAB, (batch, SEQ_LEN)).astype("int32")
  classes = 2 if kind == "transformer" else 10
  return x, rng.integers(0, classes, batch).astype("int32")


def make_model(mode, kind, jit, stack="keras3", method="auto", frozen=None):
  """A compiled model (plain or DP) of the given kind; ``frozen``: the
  index, among its layers with weights, of one made not trainable."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tf_dp  # pylint: disable=g-import-not-at-top
  if stack == "tf_keras":
    import tf_keras as keras  # pylint: disable=g-import-not-at-top
  else:
    keras = tf.keras
  model = build(keras, kind)
  if frozen is not None:
    [layer for layer in model.layers if layer.weights][frozen].trainable = False
  loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
  if mode == "dp":
    # The first-fit privacy self-check is a one-time cost outside the timed
    # epochs; its whole-model vectorized_map reference crashes Keras 3
    # MultiHeadAttention under TF 2.21's oneDNN, so it is skipped here.
    model = tf_dp.keras.make_private(model)
    opt = tf_dp.DPOptimizer(keras.optimizers.SGD(0.1), l2_norm_clip=1.0,
                            noise_multiplier=1.1, population_size=60000,
                            sampling="fixed_order",  # One batch repeated.
                            per_example_method=method)
  else:
    opt = keras.optimizers.SGD(0.1)
  model.compile(optimizer=opt, loss=loss, jit_compile=jit)
  return model


def _dataset(kind, batch):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  x, y = batch_data(kind, batch)
  return tf.data.Dataset.from_tensors((x, y)).repeat().prefetch(2)


def fit_step_time(model, data, steps, epochs, keras=None):
  """Seconds per step of ``model.fit``: best epoch after the first
  (``keras``: the model's Keras module; by default its class's package)."""
  keras = keras or sys.modules[type(model).__module__.split(".")[0]]
  starts, times = [], []
  timer = keras.callbacks.LambdaCallback(
      on_epoch_begin=lambda epoch, logs: starts.append(time.perf_counter()),
      on_epoch_end=lambda epoch, logs: times.append(
          time.perf_counter() - starts[-1]))
  model.fit(data, steps_per_epoch=steps, epochs=epochs, verbose=0, shuffle=False,
            callbacks=[timer])
  return min(times[1:]) / steps


def median_step_times(plain, dp, data, rounds, steps, keras=None):
  """Median per-step fit times (plain, dp) over ``rounds`` rounds (each
  round's time is its best epoch); which side runs first alternates, so
  that load changes hit both."""
  t_plain, t_dp = [], []
  for i in range(rounds):
    pair = [(plain, t_plain), (dp, t_dp)]
    for model, out in (pair[::-1] if i % 2 else pair):
      out.append(fit_step_time(model, data, steps, 3, keras))
  return statistics.median(t_plain), statistics.median(t_dp)


def compare(kind, batch, jit, rounds, steps=10, method="auto",
            stack="keras3"):
  """Median per-step fit times (plain, dp) over ``rounds`` alternating
  rounds (``median_step_times``)."""
  return median_step_times(make_model("plain", kind, jit, stack),
                           make_model("dp", kind, jit, stack, method),
                           _dataset(kind, batch), rounds, steps)


def _status_kib(field):
  with open("/proc/self/status") as f:
    for line in f:
      if line.startswith(field + ":"):
        return int(line.split()[1])
  raise KeyError(field)


def memory_child(mode, kind, batch, jit):
  """Runs in a subprocess: peak memory of steady-state ``fit`` steps (MiB).

  CPU: the peak-RSS mark is reset after tracing and warm-up
  (/proc/self/clear_refs); ``step_mib`` is peak minus resident before.
  GPU: TF's allocator peak after ``reset_memory_stats``.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  model = make_model(mode, kind, jit)
  data = _dataset(kind, batch)
  model.fit(data, steps_per_epoch=3, epochs=1, verbose=0, shuffle=False)
  if tf.config.list_physical_devices("GPU"):
    tf.config.experimental.reset_memory_stats("GPU:0")
    model.fit(data, steps_per_epoch=10, epochs=1, verbose=0, shuffle=False)
    peak = tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2 ** 20
    print(json.dumps({"peak_mib": peak, "step_mib": peak}))
    return
  base = _status_kib("VmRSS")
  with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
  model.fit(data, steps_per_epoch=10, epochs=1, verbose=0, shuffle=False)
  peak = _status_kib("VmHWM")
  print(json.dumps({"step_mib": (peak - base) / 1024.0,
                    "peak_mib": peak / 1024.0}))


def memory(mode, kind, batch, jit):
  out = subprocess.run(
      [sys.executable, __file__, "--memory_child", mode, kind, str(batch),
       str(int(jit))], capture_output=True, text=True, check=True)
  return json.loads(out.stdout.strip().splitlines()[-1])


def _device():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  gpus = tf.config.list_physical_devices("GPU")
  if gpus:
    return "gpu", tf.config.experimental.get_device_details(gpus[0]).get(
        "device_name", "GPU")
  return "cpu", cpu_description()


def cpu_description():
  """E.g. ``2-core Intel(R) Xeon(R) Processor, AVX-512 (oneDNN on by
  default)``: TensorFlow's CPU kernels differ with and without AVX-512."""
  name, flags = "CPU", set()
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        key, _, value = line.partition(":")
        if key.strip() == "model name":
          name = value.strip()
        elif key.strip() == "flags":
          flags = set(value.split())
  except OSError:
    pass
  avx = ("AVX-512 (oneDNN on by default)" if "avx512f" in flags
         else "no AVX-512")
  return f"{os.cpu_count()}-core {name}, {avx}"


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--quick", action="store_true")
  parser.add_argument("--xla", action="store_true",
                      help="CPU: also measure jit_compile=True")
  parser.add_argument("--models", default=",".join(KINDS))
  parser.add_argument("--memory_child", nargs=4)
  args = parser.parse_args()
  if args.memory_child:
    mode, kind, batch, jit = args.memory_child
    memory_child(mode, kind, int(batch), bool(int(jit)))
    return
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  device, device_name = _device()
  kinds = args.models.split(",")
  rounds = 4 if args.quick else 7
  jits = (False, True) if device == "gpu" or args.xla else (False,)
  batches = (256, 1024) if device == "gpu" else (256,)
  print(f"DP-SGD vs non-private model.fit step time (median of {rounds} "
        f"alternating rounds), TF {tf.__version__} defaults, {device_name}")
  print(f"{'model':11s} {'batch':>5s} {'xla':4s} {'plain ms':>9s} "
        f"{'dp ms':>9s} {'ratio':>6s} {'target':>7s}")
  best = {}
  for kind in kinds:
    for batch in batches:
      for jit in jits:
        t_plain, t_dp = compare(kind, batch, jit, rounds)
        ratio = t_dp / t_plain
        print(f"{kind:11s} {batch:5d} {str(jit)[0]:4s} {t_plain*1e3:9.2f} "
              f"{t_dp*1e3:9.2f} {ratio:6.2f} {'<= ' + str(TARGETS[kind]):>7s}",
              flush=True)
        if batch == 256 and (kind not in best or t_dp < best[kind][1]):
          best[kind] = (t_plain, t_dp, jit)
  mems = {}
  for kind in kinds:
    jit = best[kind][2]
    m_plain, m_dp = memory("plain", kind, 256, jit), memory("dp", kind, 256,
                                                             jit)
    mems[kind] = m_dp["peak_mib"] / m_plain["peak_mib"]
    print(f"{kind} memory (batch 256): peak plain {m_plain['peak_mib']:.0f} "
          f"MiB, dp {m_dp['peak_mib']:.0f} MiB (ratio {mems[kind]:.2f}); "
          f"per-step transient plain {m_plain['step_mib']:.1f} MiB, dp "
          f"{m_dp['step_mib']:.1f} MiB", flush=True)
  if not args.quick:
    print("\nBatch scaling (no XLA): DP ms per step (DP / plain)")
    for kind in kinds:
      row = []
      for batch in (32, 64, 128, 256, 512, 1024):
        t_plain, t_dp = compare(kind, batch, False, 2)
        row.append(f"{batch}:{t_dp*1e3:.1f}({t_dp/t_plain:.2f}x)")
      print(f"{kind}: " + "  ".join(row), flush=True)
  ratios = {k: best[k][1] / best[k][0] for k in kinds}
  ratios["memory"] = max(mems.values())
  for name, value in ratios.items():
    status = "met" if value <= TARGETS[name] else (
        f"MISSED by {value / TARGETS[name]:.2f}x")
    print(f"target {name} <= {TARGETS[name]}: {value:.2f} ({status})")
  print("step_time_ratio " + " ".join(
      f"{k}={ratios[k]:.2f}" if k in ratios else f"{k}=nan"
      for k in KINDS + ("memory",)))


if __name__ == "__main__":
  main()
