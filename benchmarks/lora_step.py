r"""DP fine-tuning of a KerasHub transformer, LoRA and full: step time and
peak memory against the same non-private step, and sequence-length scaling.

Model: ``keras_hub.models.BertBackbone`` built from its constructor (random
weights: presets need downloads; speed does not depend on the weights) with
a 2-class ``BertTextClassifier`` head, no dropout. LoRA: ``backbone.
enable_lora(4)`` (query and value projections; the head stays trainable).
DP: ``make_private`` + ``tf_dp.DPOptimizer`` (clip 1.0, noise 1.1,
``per_example_method="auto"``: the fast path), TF defaults, Keras 3,
``model.fit``.

Step time: plain and DP models in one process, measured alternately (which
side runs first alternates too); the median over rounds of each round's best
epoch (the machine may be shared: load slows both sides alike).

Peak memory (CPU): a fresh subprocess per configuration. ``VmHWM`` (the
kernel's high-water mark of the resident set) is reset after warm-up
(``/proc/self/clear_refs``, after ``malloc_trim`` returns freed heap to the
system, so that the steps' allocations show up again); the figure is that
mark after 5 steps minus the resident set after importing TensorFlow and
KerasHub and before building anything: ``held`` (resident after warm-up:
weights, optimizer and lot state, traced and optimised graphs, kernels'
caches) plus ``step`` (what the steps add above it), and the process
total.
TF's allocator statistics (``get_memory_info``) are for GPUs only.

  python benchmarks/lora_step.py            # table at T=128 + T scaling
  python benchmarks/lora_step.py --quick
  python benchmarks/lora_step.py --size=medium --memory_only  # 28.6M weights
The last line is ``lora_ratio lora_time=.. lora_memory=.. full_time=..
full_memory=..``.
"""

import argparse
import ctypes
import json
import os
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

TARGETS = {"lora_time": 1.3, "lora_memory": 1.1, "full_time": 1.5,
           "full_memory": 1.3}
VOCAB = 1000
# (layers, hidden, heads, intermediate): a small BERT ("BERT-mini"-like).
CONFIG = (2, 128, 4, 512)
# --size: (config, vocabulary). "medium" is a BERT of 28.6M weights, where
# per-example memory shows beside the fixed cost of the DP step's graph.
SIZES = {"small": (CONFIG, VOCAB), "medium": ((4, 512, 8, 2048), 30522)}


def build(mode, tune, seq_len, config=None):
  """A compiled BERT classifier: mode "plain" or "dp", tune "lora"/"full"."""
  import keras  # pylint: disable=g-import-not-at-top
  import keras_hub  # pylint: disable=g-import-not-at-top
  import tf_dp  # pylint: disable=g-import-not-at-top
  layers, hidden, heads, intermediate = config or CONFIG
  keras.utils.set_random_seed(0)
  backbone = keras_hub.models.BertBackbone(
      vocabulary_size=VOCAB, num_layers=layers, num_heads=heads,
      hidden_dim=hidden, intermediate_dim=intermediate,
      max_sequence_length=seq_len, dropout=0.0)
  model = keras_hub.models.BertTextClassifier(
      backbone, num_classes=2, preprocessor=None, dropout=0.0)
  if tune == "lora":
    backbone.enable_lora(4)
  loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
  if mode == "dp":
    model = tf_dp.keras.make_private(model)
    opt = tf_dp.DPOptimizer(keras.optimizers.SGD(0.01), l2_norm_clip=1.0,
                            noise_multiplier=1.1, population_size=60000)
  else:
    opt = keras.optimizers.SGD(0.01)
  model.compile(optimizer=opt, loss=loss)
  return model


def dataset(batch, seq_len):
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  tokens = rng.integers(1, VOCAB, (batch, seq_len)).astype("int32")
  x = {"token_ids": tokens, "padding_mask": np.ones_like(tokens),
       "segment_ids": np.zeros_like(tokens)}
  y = rng.integers(0, 2, batch).astype("int32")
  return tf.data.Dataset.from_tensors((x, y)).repeat().prefetch(2)


def compare(tune, batch, seq_len, rounds, steps, config=None):
  """Median per-step times (plain, dp) over alternating rounds."""
  import keras  # pylint: disable=g-import-not-at-top
  from step_time import median_step_times  # pylint: disable=g-import-not-at-top
  return median_step_times(build("plain", tune, seq_len, config),
                           build("dp", tune, seq_len, config),
                           dataset(batch, seq_len), rounds, steps, keras)


def memory_child(mode, tune, batch, seq_len):
  """Runs in a subprocess: prints peak memory in MiB (see the docstring)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top,unused-import
  import keras_hub  # pylint: disable=g-import-not-at-top,unused-import
  import tf_dp  # pylint: disable=g-import-not-at-top,unused-import
  from step_time import _status_kib  # pylint: disable=g-import-not-at-top
  base = _status_kib("VmRSS")
  model = build(mode, tune, seq_len)
  data = dataset(batch, seq_len)
  model.fit(data, steps_per_epoch=3, epochs=1, verbose=0)
  ctypes.CDLL("libc.so.6").malloc_trim(0)
  warm = _status_kib("VmRSS")
  with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
  model.fit(data, steps_per_epoch=5, epochs=1, verbose=0)
  peak = _status_kib("VmHWM")
  print(json.dumps({"train_mib": (peak - base) / 1024.0,
                    "held_mib": (warm - base) / 1024.0,
                    "step_mib": (peak - warm) / 1024.0,
                    "peak_mib": peak / 1024.0}))


def memory(mode, tune, batch, seq_len, size):
  out = subprocess.run(
      [sys.executable, __file__, "--memory_child", mode, tune, str(batch),
       str(seq_len), "--size", size], capture_output=True, text=True,
      check=True)
  return json.loads(out.stdout.strip().splitlines()[-1])


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--quick", action="store_true")
  parser.add_argument("--batch", type=int, default=32)
  parser.add_argument("--seq_len", type=int, default=128)
  parser.add_argument("--scaling", default="64,256,1024")
  parser.add_argument("--memory_child", nargs=4)
  parser.add_argument("--size", choices=sorted(SIZES), default="small")
  parser.add_argument("--memory_only", action="store_true",
                      help="Only the memory rows (no timing, no scaling).")
  args = parser.parse_args()
  global CONFIG, VOCAB  # pylint: disable=global-statement
  CONFIG, VOCAB = SIZES[args.size]
  if args.memory_child:
    mode, tune, batch, seq_len = args.memory_child
    memory_child(mode, tune, int(batch), int(seq_len))
    return
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from step_time import cpu_description  # pylint: disable=g-import-not-at-top
  rounds = 3 if args.quick else 5
  layers, hidden, heads, intermediate = CONFIG
  print(f"BERT classifier ({layers} layers, hidden {hidden}, {heads} heads, "
        f"intermediate {intermediate}, vocabulary {VOCAB}), batch "
        f"{args.batch}, T={args.seq_len}; DP vs non-private model.fit, "
        f"median of {rounds} alternating rounds; TF {tf.__version__} "
        f"defaults, {cpu_description()}")
  ratios = {}
  for tune in ("lora", "full"):
    m_plain = memory("plain", tune, args.batch, args.seq_len, args.size)
    m_dp = memory("dp", tune, args.batch, args.seq_len, args.size)
    if not args.memory_only:
      t_plain, t_dp = compare(tune, args.batch, args.seq_len, rounds, 5)
      ratios[f"{tune}_time"] = t_dp / t_plain
    ratios[f"{tune}_memory"] = m_dp["train_mib"] / m_plain["train_mib"]
    if args.memory_only:
      print(f"{tune:4s} memory above the imported runtime: plain "
            f"{m_plain['train_mib']:.0f} MiB, dp {m_dp['train_mib']:.0f} MiB "
            f"({ratios[f'{tune}_memory']:.2f}x)", flush=True)
      continue
    print(f"{tune:4s} time: plain {t_plain*1e3:.1f} ms, dp {t_dp*1e3:.1f} ms "
          f"({t_dp/t_plain:.2f}x); memory above the imported runtime: plain "
          f"{m_plain['train_mib']:.0f} MiB (held {m_plain['held_mib']:.0f} + "
          f"step {m_plain['step_mib']:.0f}), dp {m_dp['train_mib']:.0f} MiB "
          f"(held {m_dp['held_mib']:.0f} + step {m_dp['step_mib']:.0f}): "
          f"{ratios[f'{tune}_memory']:.2f}x; process peak plain "
          f"{m_plain['peak_mib']:.0f} MiB, dp {m_dp['peak_mib']:.0f} MiB "
          f"({m_dp['peak_mib']/m_plain['peak_mib']:.2f}x)", flush=True)
  if args.scaling and not args.memory_only:
    print("\nSequence-length scaling (same model, batch x T = "
          f"{args.batch * args.seq_len} tokens per step): DP / plain time")
    for seq_len in [int(t) for t in args.scaling.split(",")]:
      batch = max(1, args.batch * args.seq_len // seq_len)
      row = []
      for tune in ("lora", "full"):
        t_plain, t_dp = compare(tune, batch, seq_len, 2 if args.quick else 3,
                                3)
        row.append(f"{tune} {t_plain*1e3:.0f} -> {t_dp*1e3:.0f} ms "
                   f"({t_dp/t_plain:.2f}x)")
      print(f"T={seq_len:5d} batch {batch:3d}: " + "; ".join(row), flush=True)
  for name, value in ratios.items():
    status = "met" if value <= TARGETS[name] else (
        f"MISSED by {value / TARGETS[name]:.2f}x")
    print(f"target {name} <= {TARGETS[name]}: {value:.2f} ({status})")
  print("lora_ratio " + " ".join(f"{k}={v:.2f}" for k, v in ratios.items()))


if __name__ == "__main__":
  main()
