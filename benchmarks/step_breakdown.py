r"""Where a DP step's extra time goes, layer by layer, measured with the
public API only: the DP step with one layer frozen against the full DP
step, minus the same difference for the non-private step.

For each layer with trainable weights, the DP excess of the layer is

  (dp - dp with the layer frozen) - (plain - plain with the layer frozen)

A frozen layer has no gradient in either step, so this is what the DP step
spends on that layer (its per-record norms and clipped sum) beyond the
non-private step's kernel gradient of it. What remains when every layer's
share is taken away (the total excess minus the layers' shares) is the
lot's shared work: clip scales, noise, the ledger and the update. Shares
of different layers overlap on a multi-core CPU (TensorFlow runs
independent ops at once), so they need not add up to the total.

Same settings as ``step_time.py`` (its models and data, TF defaults,
Keras 3, ``model.fit``, batch 256); every configuration is built in one
process and measured in alternating rounds (the order reverses every
round), each round's figure the best epoch after the first.

  python benchmarks/step_breakdown.py                # the tutorial CNN
  python benchmarks/step_breakdown.py --model mlp --rounds 8
"""

import argparse
import os
import statistics
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import step_time  # pylint: disable=g-import-not-at-top,wrong-import-position


def weighted_layer_names(kind):
  """Names of the layers with weights of ``step_time``'s model, in the
  order ``step_time.make_model``'s ``frozen`` indexes them."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return [layer.name for layer in step_time.build(tf.keras, kind).layers
          if layer.weights]


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--model", default="cnn", choices=step_time.KINDS)
  parser.add_argument("--batch", type=int, default=256)
  parser.add_argument("--rounds", type=int, default=6)
  args = parser.parse_args()
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  names = weighted_layer_names(args.model)
  data = step_time._dataset(args.model, args.batch)  # pylint: disable=protected-access
  configs = [(mode, frozen) for frozen in [None] + list(range(len(names)))
             for mode in ("plain", "dp")]
  models = {}
  for mode, frozen in configs:
    models[mode, frozen] = step_time.make_model(mode, args.model, False,
                                                frozen=frozen)
    models[mode, frozen].fit(data, steps_per_epoch=3, epochs=1, verbose=0)
  times = {config: [] for config in configs}
  for i in range(args.rounds):
    for config in (configs[::-1] if i % 2 else configs):
      times[config].append(step_time.fit_step_time(models[config], data, 10,
                                                   3))
  ms = {config: statistics.median(t) * 1e3 for config, t in times.items()}
  plain, dp = ms["plain", None], ms["dp", None]
  print(f"{args.model}, batch {args.batch}, TF {tf.__version__} defaults, "
        f"{step_time.cpu_description()}, median of {args.rounds} alternating "
        f"rounds")
  print(f"step: plain {plain:.2f} ms, dp {dp:.2f} ms, ratio {dp / plain:.2f}, "
        f"DP excess {dp - plain:.2f} ms")
  print(f"{'layer frozen':24s} {'plain ms':>9s} {'dp ms':>9s} "
        f"{'DP excess of the layer':>23s}")
  shares = 0.0
  for index, name in enumerate(names):
    p, d = ms["plain", index], ms["dp", index]
    share = (dp - d) - (plain - p)
    shares += share
    print(f"{name:24s} {p:9.2f} {d:9.2f} {share:17.2f} ms "
          f"({share / (dp - plain):5.0%})")
  print(f"{'rest (shared work)':24s} {'':9s} {'':9s} "
        f"{dp - plain - shares:17.2f} ms")


if __name__ == "__main__":
  main()
