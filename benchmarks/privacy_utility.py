r"""Privacy-utility of the MNIST CNN beside TF Privacy's and Opacus's numbers.

Trains the CNN of the TF Privacy MNIST tutorial with DP-SGD to epsilon ~ 1.2, 3
and 7 (delta = 1e-5) with the published hyperparameters of that tutorial
(clip, learning rate, epochs, batch 256), Poisson sampling, and the noise
multiplier that tf_dp's default accountant (PLD) gives for the target.
Prints the test accuracy beside the published numbers of TF Privacy
(95.0 / 96.6 / 97.0 %) and Opacus (94.6 / 96.8 / 97.1 %), the epsilon of each
run's ledger, and writes a plot of accuracy against epsilon.

  python benchmarks/privacy_utility.py [--epoch_scale=0.1] [--out=out]
      [--targets=1.2,3,7]
"""

import argparse
import json
import os
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# target eps: (clip, learning rate, epochs) of the TF Privacy tutorial table,
# and the published accuracies of TF Privacy and Opacus at that epsilon.
CONFIGS = [(1.2, 1.5, 0.25, 15, 0.950, 0.946),
           (3.0, 1.0, 0.15, 60, 0.966, 0.968),
           (7.0, 1.5, 0.25, 45, 0.970, 0.971)]


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--epoch_scale", type=float, default=1.0,
                      help="Multiply the epochs (e.g. 0.1 for a smoke run).")
  parser.add_argument("--out", default=os.path.join(ROOT, "out",
                                                    "privacy_utility"))
  parser.add_argument("--targets", default="1.2,3,7",
                      help="Comma-separated target epsilons to run.")
  args = parser.parse_args()
  targets = {float(t) for t in args.targets.split(",")}
  os.makedirs(args.out, exist_ok=True)
  rows = []
  print(f"{'target eps':>10s} {'epochs':>6s} {'noise':>6s} {'tf_dp acc':>9s} "
        f"{'ledger eps':>10s} {'TF Privacy':>10s} {'Opacus':>7s}")
  for eps, clip, lr, epochs, tfp, opacus in CONFIGS:
    if eps not in targets:
      continue
    epochs = max(1, round(epochs * args.epoch_scale))
    run_dir = os.path.join(args.out, f"eps_{eps:g}")
    subprocess.run(
        [sys.executable, os.path.join(ROOT, "tutorials", "mnist_dpsgd_keras.py"),
         f"--epochs={epochs}", f"--target_epsilon={eps}",
         f"--l2_norm_clip={clip}", f"--learning_rate={lr}",
         "--batch_size=256", "--sampling=poisson", f"--out_dir={run_dir}",
         "--verbose=0"], check=True, capture_output=True, text=True)
    summary = json.load(open(os.path.join(run_dir, "summary.json")))
    rows.append((eps, summary["test_accuracy"], summary["epsilon"], tfp,
                 opacus))
    print(f"{eps:10.1f} {epochs:6d} {summary['noise_multiplier']:6.3f} "
          f"{summary['test_accuracy']:9.4f} {summary['epsilon']:10.3f} "
          f"{tfp:10.3f} {opacus:7.3f}")
  try:
    import matplotlib  # pylint: disable=g-import-not-at-top
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot([r[2] for r in rows], [r[1] for r in rows], "o-", label="tf_dp")
    ax.plot([r[0] for r in rows], [r[3] for r in rows], "s--",
            label="TF Privacy (published)")
    ax.plot([r[0] for r in rows], [r[4] for r in rows], "^--",
            label="Opacus (published)")
    ax.set(xlabel="epsilon (delta = 1e-5)", ylabel="MNIST test accuracy",
           title="Privacy-utility, MNIST CNN")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "privacy_utility.png"), dpi=100)
    print(f"plot: {os.path.join(args.out, 'privacy_utility.png')}")
  except ImportError:
    print("matplotlib not installed: no plot")
  line = " ".join(f"eps{r[0]:g}={r[1]:.4f}" for r in rows)
  print(f"privacy_utility {line}")


if __name__ == "__main__":
  main()
