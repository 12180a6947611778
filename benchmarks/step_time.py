r"""Step time and memory of DP-SGD against non-private training.

Models: the MNIST CNN of the TF Privacy tutorial and a 784-512-10 MLP, batch
256, clip 1.0, noise 1.1, SGD. Timings are the median of repeated training
steps of the same model compiled both ways **in the same process**,
alternating; the ratio is DP / non-private. Peak memory is the growth of
the resident set during training, measured in a fresh subprocess per
configuration (peak RSS is process-wide). The last line is

  step_time_ratio cnn=<x> mlp=<y> memory=<z>

(fast path, batch 256, Keras 3, the better of jit_compile on/off per mode).

  python benchmarks/step_time.py            # full table
  python benchmarks/step_time.py --quick    # fewer repeats, no scaling
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

TARGETS = {"cnn": 2.0, "mlp": 1.5, "memory": 1.5}


def build(keras, kind):
  layers = keras.layers
  if kind == "cnn":
    return keras.Sequential([
        layers.Input((28, 28, 1)),
        layers.Conv2D(16, 8, strides=2, padding="same", activation="relu"),
        layers.MaxPool2D(2, 1),
        layers.Conv2D(32, 4, strides=2, padding="valid", activation="relu"),
        layers.MaxPool2D(2, 1), layers.Flatten(),
        layers.Dense(32, activation="relu"), layers.Dense(10)])
  return keras.Sequential([layers.Input((784,)),
                           layers.Dense(512, activation="relu"),
                           layers.Dense(10)])


def make_step(mode, kind, batch, jit, stack="keras3", method="fast"):
  """A compiled training step function and its inputs."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tf_dp  # pylint: disable=g-import-not-at-top
  if stack == "tf_keras":
    import tf_keras as keras  # pylint: disable=g-import-not-at-top
  else:
    keras = tf.keras
  model = build(keras, kind)
  loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
  if mode == "dp":
    model = tf_dp.keras.make_private(model)
    opt = tf_dp.DPOptimizer(keras.optimizers.SGD(0.1), l2_norm_clip=1.0,
                            noise_multiplier=1.1, population_size=60000,
                            per_example_method=method, max_lots=10 ** 6)
  else:
    opt = keras.optimizers.SGD(0.1)
  model.compile(optimizer=opt, loss=loss)
  rng = np.random.default_rng(0)
  shape = (batch, 28, 28, 1) if kind == "cnn" else (batch, 784)
  x = tf.constant(rng.random(shape, dtype=np.float32))
  y = tf.constant(rng.integers(0, 10, batch).astype("int32"))
  step = tf.function(lambda x, y: model.train_step((x, y)), jit_compile=jit)
  return step, x, y


def time_steps(step, x, y, repeats):
  step(x, y)
  step(x, y)
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    out = step(x, y)
    _ = [float(v) for v in out.values()] if isinstance(out, dict) else out
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def compare(kind, batch, jit, repeats, method="fast", stack="keras3"):
  """Median step times (plain, dp) measured alternately in this process."""
  plain = make_step("plain", kind, batch, jit, stack)
  dp = make_step("dp", kind, batch, jit, stack, method)
  t_plain, t_dp = [], []
  for _ in range(3):
    t_plain.append(time_steps(*plain, repeats))
    t_dp.append(time_steps(*dp, repeats))
  return min(t_plain), min(t_dp)


def _status_kib(field):
  with open("/proc/self/status") as f:
    for line in f:
      if line.startswith(field + ":"):
        return int(line.split()[1])
  raise KeyError(field)


def memory_child(mode, kind, batch, jit, method):
  """Runs in a subprocess: peak RSS while training, after warm-up (MiB).

  The peak-RSS mark is reset after tracing and two warm-up steps
  (/proc/self/clear_refs), so the peak is that of steady-state steps:
  the process's model, data and TF runtime plus each step's transient
  memory. ``step_mib`` is the transient part (peak minus resident before).
  """
  step, x, y = make_step(mode, kind, batch, jit, method=method)
  step(x, y)
  step(x, y)
  base = _status_kib("VmRSS")
  with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
  for _ in range(20):
    step(x, y)
  peak = _status_kib("VmHWM")
  print(json.dumps({"step_mib": (peak - base) / 1024.0,
                    "peak_mib": peak / 1024.0}))


def memory(mode, kind, batch, jit, method="fast"):
  out = subprocess.run(
      [sys.executable, __file__, "--memory_child", mode, kind, str(batch),
       str(int(jit)), method], capture_output=True, text=True, check=True)
  return json.loads(out.stdout.strip().splitlines()[-1])


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--quick", action="store_true")
  parser.add_argument("--memory_child", nargs=5)
  args = parser.parse_args()
  if args.memory_child:
    mode, kind, batch, jit, method = args.memory_child
    memory_child(mode, kind, int(batch), bool(int(jit)), method)
    return
  repeats = 5 if args.quick else 15
  print("DP-SGD step time vs non-private (median, same process), batch 256,"
        " 2-core CPU")
  print(f"{'model':5s} {'path':10s} {'xla':4s} {'plain ms':>9s} "
        f"{'dp ms':>9s} {'ratio':>6s} {'target':>7s}")
  best = {}
  for kind in ("cnn", "mlp"):
    for method in ("fast", "vectorized"):
      for jit in (False, True):
        if method == "vectorized" and jit:
          continue  # XLA cannot compile pfor's while_loop fallbacks.
        t_plain, t_dp = compare(kind, 256, jit, repeats, method)
        ratio = t_dp / t_plain
        target = TARGETS[kind] if method == "fast" else None
        print(f"{kind:5s} {method:10s} {str(jit)[0]:4s} {t_plain*1e3:9.2f} "
              f"{t_dp*1e3:9.2f} {ratio:6.2f} "
              f"{(f'<= {target:.1f}' if target else '-'):>7s}")
        if method == "fast":
          # Per device, use whichever of XLA on/off is faster for DP.
          if kind not in best or t_dp < best[kind][1]:
            best[kind] = (t_plain, t_dp, jit)
  for kind, (t_plain, t_dp, jit) in best.items():
    print(f"{kind}: fastest DP configuration uses jit_compile={jit}")
  mems = {}
  for kind in ("cnn", "mlp"):
    jit = best[kind][2]
    m_plain = memory("plain", kind, 256, jit)
    m_dp = memory("dp", kind, 256, jit)
    mems[kind] = (m_dp["peak_mib"] / m_plain["peak_mib"],
                  m_plain, m_dp)
    print(f"{kind} memory: peak RSS plain {m_plain['peak_mib']:.0f} MiB, "
          f"dp {m_dp['peak_mib']:.0f} MiB (ratio "
          f"{mems[kind][0]:.2f}, target <= {TARGETS['memory']}); transient "
          f"per step plain {m_plain['step_mib']:.1f} MiB, dp "
          f"{m_dp['step_mib']:.1f} MiB")
  if not args.quick:
    print("\nBatch scaling (fast path, no XLA): ms per step")
    for kind in ("cnn", "mlp"):
      row = []
      for batch in (32, 64, 128, 256, 512, 1024):
        t_plain, t_dp = compare(kind, batch, False, max(3, repeats // 3))
        row.append(f"{batch}:{t_dp*1e3:.1f}({t_dp/t_plain:.2f}x)")
      print(f"{kind}: " + "  ".join(row))
  cnn = best["cnn"][1] / best["cnn"][0]
  mlp = best["mlp"][1] / best["mlp"][0]
  mem = max(mems["cnn"][0], mems["mlp"][0])
  for name, value in (("cnn", cnn), ("mlp", mlp), ("memory", mem)):
    status = "met" if value <= TARGETS[name] else (
        f"MISSED by {value / TARGETS[name]:.2f}x")
    print(f"target {name} <= {TARGETS[name]}: {value:.2f} ({status})")
  print(f"step_time_ratio cnn={cnn:.2f} mlp={mlp:.2f} memory={mem:.2f}")


if __name__ == "__main__":
  main()
