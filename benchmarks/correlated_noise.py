r"""Correlated noise against DP-SGD on MNIST or Fashion-MNIST, small settings
for a 2-core CPU.

One model (MLP 784-128-10), one optimizer (SGD), the same clip, batch and
epochs for every method; per target epsilon (delta = 1e-5) each method's
noise multiplier is the smallest its own accounting allows:

* ``dpsgd_poisson``: Poisson lots (``tf_dp.data.poisson_sampled_batches``),
  PLD accountant with amplification by sampling;
* ``dpsgd_shuffled``: batches of one fixed order, accounted honestly, with
  no amplification (k passes = k Gaussian mechanisms of replace-one
  sensitivity 2C: the identity strategy, ``banded_strategy(steps, 1)``);
* ``tree``: binary-tree aggregation restarted every ``2^h <= steps per
  pass`` steps (DP-FTRL noise, Kairouz et al. 2021);
* ``bandmf``: banded Toeplitz strategy with ``bands`` <= steps per pass,
  optimised offline (Choquette-Choo et al. 2023, McKenna 2024).

Reports test accuracy per seed, the ledger's epsilon, the median step time
and the noise state's memory.

  python benchmarks/correlated_noise.py [--dataset=mnist|fashion_mnist]
      [--train=6000] [--epochs=4] [--seeds=0,1] [--targets=1,3,8]
      [--bands=16] [--out=FILE]

MNIST comes from ``tf_dp.data.load_mnist``. Fashion-MNIST (Xiao, Rasul &
Vollgraf 2017) is read offline from its four IDX files
(``train-images-idx3-ubyte.gz`` etc.) in ``--fashion_mnist_dir``, where
Debian's package puts them: ``apt-get install dataset-fashion-mnist``
(``/usr/share/datasets/fashion-mnist``); without them the run stops with
that advice.
"""

import argparse
import gzip
import math
import os
import statistics
import time
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

import tf_dp  # pylint: disable=g-import-not-at-top
from tf_dp.analysis import matrix_factorization as mf  # pylint: disable=g-import-not-at-top

DELTA = 1e-5
CLIP = 1.0
METHODS = ("dpsgd_poisson", "dpsgd_shuffled", "tree", "bandmf")


FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"


def _idx(path):
  """The array of one gzipped IDX file (big-endian header: magic, dims)."""
  with gzip.open(path, "rb") as f:
    data = f.read()
  ndim = data[3]
  shape = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big")
                for i in range(ndim))
  return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(shape)


def load_fashion_mnist(directory=FASHION_MNIST_DIR):
  """Fashion-MNIST as ``(x_train, y_train), (x_test, y_test)`` (uint8)."""
  names = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
           "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
  paths = [os.path.join(directory, name) for name in names]
  missing = [p for p in paths if not os.path.exists(p)]
  if missing:
    raise SystemExit(
        f"Fashion-MNIST not found ({missing[0]} is missing). Offline on "
        f"Debian/Ubuntu: `apt-get install dataset-fashion-mnist` (it installs "
        f"the IDX files in {FASHION_MNIST_DIR}), or pass "
        f"--fashion_mnist_dir=DIR holding {', '.join(names)}.")
  x, y, xt, yt = (_idx(p) for p in paths)
  return (x, y.astype(np.int64)), (xt, yt.astype(np.int64))


def _model(keras, seed):
  init = keras.initializers.GlorotUniform(seed=seed)
  return keras.Sequential([
      keras.layers.Input((784,)),
      keras.layers.Dense(128, activation="relu", kernel_initializer=init),
      keras.layers.Dense(10, kernel_initializer=init)])


class _StepTimes(tf.keras.callbacks.Callback):

  def __init__(self):
    super().__init__()
    self.times, self._start = [], None

  def on_train_batch_begin(self, batch, logs=None):
    self._start = time.perf_counter()

  def on_train_batch_end(self, batch, logs=None):
    self.times.append(time.perf_counter() - self._start)


def _strategy(method, steps, steps_per_pass, bands):
  if method == "dpsgd_shuffled":
    return mf.banded_strategy(steps, 1)
  if method == "tree":
    return mf.tree_strategy(steps, int(math.floor(math.log2(steps_per_pass))))
  return mf.banded_strategy(steps, min(bands, steps_per_pass))


def run(method, target, seed, data, args):
  keras = tf.keras
  (x, y), (xt, yt) = data
  n, batch = len(x), args.batch
  steps_per_pass = -(-n // batch)
  steps = steps_per_pass * args.epochs
  tf.keras.utils.set_random_seed(seed)
  model = tf_dp.keras.make_private(_model(keras, seed))
  strategy = None
  if method == "dpsgd_poisson":
    sigma = tf_dp.analysis.compute_noise_multiplier(
        n, batch, target, args.epochs, DELTA, sampling="poisson")
    optimizer = tf_dp.DPOptimizer(
        keras.optimizers.SGD(args.learning_rate), CLIP, sigma,
        population_size=n, sampling="poisson",
        sampling_probability=batch / n, max_lots=steps + 10)
  else:
    strategy = _strategy(method, steps, steps_per_pass, args.bands)
    sens = strategy.released_sensitivity(
        steps, args.epochs, steps_per_pass if args.epochs > 1 else None)
    sigma = mf.noise_multiplier_for_epsilon(sens, target, DELTA)
    optimizer = tf_dp.DPOptimizer(
        keras.optimizers.SGD(args.learning_rate), CLIP, sigma,
        population_size=n, noise_strategy=strategy, max_passes=args.epochs,
        max_lots=steps + 10)
  model.compile(optimizer=optimizer,
                loss=keras.losses.SparseCategoricalCrossentropy(
                    from_logits=True),
                weighted_metrics=["accuracy"])
  timer = _StepTimes()
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    if method == "dpsgd_poisson":
      lots = tf_dp.data.poisson_sampled_batches(x, y, batch / n, steps)
      model.fit(lots, steps_per_epoch=steps_per_pass, epochs=args.epochs,
                callbacks=[timer], verbose=0)
    else:
      model.fit(x, y, batch_size=batch, epochs=args.epochs, shuffle=False,
                callbacks=[timer], verbose=0)
    eps, _ = tf_dp.analysis.compute_epsilon_from_ledger(optimizer.ledger,
                                                        DELTA)
  _, accuracy = model.evaluate(xt, yt, verbose=0)
  state_bytes = 0
  if strategy is not None:
    query = optimizer.dp_engine.gradient_query
    state_bytes = query.state_size * 4
  return {"sigma": sigma, "eps": eps, "accuracy": accuracy,
          "step_ms": 1e3 * statistics.median(timer.times[steps_per_pass:]
                                             or timer.times),
          "state_bytes": state_bytes}


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--dataset", default="mnist",
                      choices=("mnist", "fashion_mnist"))
  parser.add_argument("--fashion_mnist_dir", default=FASHION_MNIST_DIR)
  parser.add_argument("--train", type=int, default=6000)
  parser.add_argument("--test", type=int, default=10000)
  parser.add_argument("--epochs", type=int, default=4)
  parser.add_argument("--batch", type=int, default=100)
  parser.add_argument("--learning_rate", type=float, default=0.5)
  parser.add_argument("--bands", type=int, default=16)
  parser.add_argument("--seeds", default="0,1")
  parser.add_argument("--targets", default="1,3,8")
  parser.add_argument("--methods", default=",".join(METHODS))
  parser.add_argument("--out", default=None)
  args = parser.parse_args()
  if args.dataset == "fashion_mnist":
    (x, y), (xt, yt) = load_fashion_mnist(args.fashion_mnist_dir)
  else:
    (x, y), (xt, yt) = tf_dp.data.load_mnist()
  # A fixed order for the fixed-order methods: one shuffle, seed 0.
  order = np.random.default_rng(0).permutation(len(x))[:args.train]
  x = (x[order].reshape(-1, 784) / 255.0).astype("float32")
  y = y[order].astype("int32")
  xt = (xt[:args.test].reshape(-1, 784) / 255.0).astype("float32")
  yt = yt[:args.test].astype("int32")
  data = ((x, y), (xt, yt))
  params = 784 * 128 + 128 + 128 * 10 + 10
  lines = [f"# python benchmarks/correlated_noise.py --dataset="
           f"{args.dataset} --train={args.train} "
           f"--epochs={args.epochs} --batch={args.batch} --learning_rate="
           f"{args.learning_rate} --bands={args.bands} --seeds={args.seeds}; "
           f"MLP 784-128-10 ({params} weights), SGD, clip {CLIP}, delta "
           f"{DELTA}, {time.strftime('%Y-%m-%d')}, TF {tf.__version__}, "
           f"2-core CPU shared with other jobs",
           f"{'method':>15s} {'eps':>4s} {'sigma':>7s} {'ledger eps':>10s} "
           f"{'accuracy per seed':>22s} {'mean':>6s} {'step ms':>7s} "
           f"{'noise state':>12s}"]
  print("\n".join(lines), flush=True)
  seeds = [int(s) for s in args.seeds.split(",")]
  for target in [float(t) for t in args.targets.split(",")]:
    for method in args.methods.split(","):
      results = [run(method, target, seed, data, args) for seed in seeds]
      accs = [r["accuracy"] for r in results]
      line = (f"{method:>15s} {target:4g} {results[0]['sigma']:7.3f} "
              f"{max(r['eps'] for r in results):10.3f} "
              f"{' '.join(f'{a:.4f}' for a in accs):>22s} "
              f"{statistics.mean(accs):6.4f} "
              f"{statistics.median(r['step_ms'] for r in results):7.2f} "
              f"{results[0]['state_bytes'] / 2**20:9.2f} MiB")
      lines.append(line)
      print(line, flush=True)
  if args.out:
    with open(args.out, "w") as f:
      f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
  main()
