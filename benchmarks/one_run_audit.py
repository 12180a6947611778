r"""One-run audits of the README main job's MNIST run (Steinke et al. 2023).

For each ledger ε (δ = 1e-5) it trains the main job's CNN
(``tutorials/mnist_dpsgd_keras.py``: batch 256 of Poisson lots, clip 1.5,
SGD 0.25, Keras 3) twice: once on MNIST alone (the baseline), once with
canaries mixed in, and audits the second run both ways at once:

* white-box: Dirac canaries on an audit table (``with_dirac_canaries``),
  scored by the final table (the paper's parameter difference), and by the
  likelihood ratio of every lot's update (an auditor that sees every
  iterate, as the ledger's ε allows: per lot, ``log(1 − q + q exp((x −
  1/2) / z²))`` of the canary's update ``x`` in units of one clipped
  canary, summed; SGD only);
* black-box: mislabeled canaries from the second half of the MNIST test set
  (the first half measures accuracy), scored by their loss.

"ideal" is the same white-box audit of simulated runs (numpy: the same m,
q, lots and noise multiplier, exact Gaussian noise; mean +- sd of 5), the
bound that a correct DP step should give. The noise multiplier is calibrated (PLD) to
each ε for the audited run's population (examples + included canaries);
the ε printed is its ledger's. Cost: each run's ``fit`` seconds and median
milliseconds per lot (the audited run's include the per-lot table trace of
the likelihood-ratio auditor), their accuracy on the held-out half, and a
last timing of alternating fits (baseline, audited, audited with the
trace) that the other jobs of a shared machine move less.

  python benchmarks/one_run_audit.py [--epochs=5] [--canaries=5000]
      [--epsilons=1,2,4,8] [--quick]

Ends with ``one_run_audit eps1=<white final>/<white lr>/<black> ...
cost=<audited / baseline ms per lot>``. At the defaults it takes about 12
minutes on 2 shared cores.
"""

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
DELTA = 1e-5
BATCH, CLIP, LEARNING_RATE = 256, 1.5, 0.25


def likelihood_ratio_scores(steps, q, noise_multiplier):
  """Per-lot log-likelihood ratios of "included" summed per canary; each
  row of ``steps`` is one lot's updates in units of one clipped canary."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  return np.logaddexp(np.log1p(-q), np.log(q) + (steps - 0.5) /
                      noise_multiplier ** 2).sum(axis=0)


def ideal_bounds(included, q, num_lots, noise_multiplier, seed, runs=5):
  """Mean and standard deviation over ``runs`` simulated runs of the
  white-box bounds: ``((final mean, sd), (likelihood ratio mean, sd))``."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tf_dp  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  bounds = []
  for _ in range(runs):
    total = np.zeros(included.size)
    ratio = np.zeros(included.size)
    for _ in range(num_lots):
      x = ((rng.random(included.size) < q) & included) + (
          noise_multiplier * rng.normal(size=included.size))
      total += x
      ratio += likelihood_ratio_scores(x[None], q, noise_multiplier)
    bounds.append([tf_dp.analysis.one_run_audit(
        s, included, delta=DELTA).epsilon_lower_bound for s in (total, ratio)])
  bounds = np.array(bounds)
  return tuple(zip(bounds.mean(axis=0), bounds.std(axis=0, ddof=1)))


class LotTimes:
  """The wall time of every lot of a fit (a Keras callback's hooks): the
  median is robust to the other jobs of a shared machine."""

  def __init__(self):
    self.starts, self.seconds = [], []

  def callback(self, keras):
    return keras.callbacks.LambdaCallback(
        on_train_batch_begin=lambda batch, logs: self.starts.append(
            time.perf_counter()),
        on_train_batch_end=lambda batch, logs: self.seconds.append(
            time.perf_counter() - self.starts[-1]))

  def median_ms(self):
    import numpy as np  # pylint: disable=g-import-not-at-top
    return 1000 * float(np.median(self.seconds[1:]))  # The first traces.


class TableTrace:
  """Keeps the audit table after every lot (a Keras callback's hook)."""

  def __init__(self, table):
    self.table = table
    self.snapshots = [table.get_weights()[0][:, 0].copy()]

  def callback(self, keras):
    return keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: self.snapshots.append(
            self.table.get_weights()[0][:, 0].copy()))


def train(keras, tf_dp, build_cnn, x, y, noise, num_lots, population,
          test, dirac=None):
  """One DP run of the main job's CNN; returns (cnn, trained model,
  optimizer, (seconds of fit, median ms per lot), test accuracy, table
  trace or None)."""
  cnn = build_cnn(keras)
  model = cnn if dirac is None else tf_dp.keras.with_dirac_canaries(
      cnn, dirac)
  model = tf_dp.keras.make_private(model)
  q = BATCH / population
  optimizer = tf_dp.DPOptimizer(
      keras.optimizers.SGD(LEARNING_RATE), l2_norm_clip=CLIP,
      noise_multiplier=noise, population_size=population,
      sampling="poisson", sampling_probability=q, max_lots=num_lots + 10)
  model.compile(optimizer=optimizer,
                loss=keras.losses.SparseCategoricalCrossentropy(
                    from_logits=True))
  trace, times = None, LotTimes()
  callbacks = [times.callback(keras)]
  if dirac is not None:
    trace = TableTrace(model.get_layer(tf_dp.keras.canaries.AUDIT_TABLE))
    callbacks.append(trace.callback(keras))
  lots = tf_dp.data.poisson_sampled_batches(x, y, q, num_lots)
  start = time.time()
  model.fit(lots, epochs=1, verbose=0, callbacks=callbacks)
  seconds = time.time() - start
  cnn.compile(loss=keras.losses.SparseCategoricalCrossentropy(
      from_logits=True), metrics=["accuracy"])
  accuracy = cnn.evaluate(*test, verbose=0)[1]
  return cnn, model, optimizer, (seconds, times.median_ms()), accuracy, trace


def timing(keras, tf_dp, build_cnn, x, y, mixed, dirac, noise, rounds=9,
           lots=60):
  """Median ms per lot of the baseline, the audited model, and the audited
  model with the per-lot table trace, in alternating fits of ``lots`` lots
  (``rounds`` each, after one fit that traces): alternation spreads the
  other jobs of a shared machine over all three."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  runs = {}
  for name, (data_x, data_y, audit) in (
      ("base", (x, y, None)), ("audited", (mixed.x, mixed.y, dirac)),
      ("audited+trace", (mixed.x, mixed.y, dirac))):
    cnn = build_cnn(keras)
    model = tf_dp.keras.make_private(
        cnn if audit is None else tf_dp.keras.with_dirac_canaries(cnn, audit))
    q = BATCH / len(data_y)
    model.compile(optimizer=tf_dp.DPOptimizer(
        keras.optimizers.SGD(LEARNING_RATE), l2_norm_clip=CLIP,
        noise_multiplier=noise, population_size=len(data_y),
        sampling="poisson", sampling_probability=q,
        max_lots=(rounds + 1) * lots + 10),
                  loss=keras.losses.SparseCategoricalCrossentropy(
                      from_logits=True))
    extra = []
    if name == "audited+trace":
      extra = [TableTrace(model.get_layer(
          tf_dp.keras.canaries.AUDIT_TABLE)).callback(keras)]
    runs[name] = (model, data_x, data_y, q, extra, [])
  for round_ in range(rounds + 1):
    for model, data_x, data_y, q, extra, medians in runs.values():
      times = LotTimes()
      model.fit(tf_dp.data.poisson_sampled_batches(data_x, data_y, q, lots),
                epochs=1, verbose=0, callbacks=[times.callback(keras)] + extra)
      if round_:  # Round 0 traces.
        medians.append(times.median_ms())
  return {name: float(np.median(run[-1])) for name, run in runs.items()}


def audit_at(keras, tf_dp, build_cnn, x, y, test, pool, m, epochs, target,
             index):
  """The baseline and the audited run at ledger ε ``target``; prints and
  returns the table's row, with the mixed data, the Dirac canaries and the
  noise multiplier."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  black = tf_dp.data.mislabeled_canaries(*pool, m, seed=100 + index)
  dirac = tf_dp.data.dirac_canaries(m, seed=200 + index)
  mixed = tf_dp.data.mix_canaries(x, y, black)
  mixed = tf_dp.data.mix_canaries(mixed.x, mixed.y, dirac)
  n = mixed.population_size
  noise = tf_dp.analysis.compute_noise_multiplier(n, BATCH, target, epochs,
                                                  DELTA)
  num_lots = int(round(epochs * n / BATCH))
  _, _, _, t_base, acc_base, _ = train(
      keras, tf_dp, build_cnn, x, y, noise,
      int(round(epochs * len(x) / BATCH)), len(x), test)
  cnn, model, optimizer, t_audit, acc_audit, trace = train(
      keras, tf_dp, build_cnn, mixed.x, mixed.y, noise, num_lots, n, test,
      dirac)
  epsilon, _ = tf_dp.analysis.compute_epsilon_from_ledger(optimizer.ledger,
                                                          DELTA)
  white = tf_dp.keras.audit_canaries(model, dirac, delta=DELTA,
                                     ledger=optimizer.ledger)
  black_report = tf_dp.keras.audit_canaries(cnn, black, delta=DELTA,
                                            ledger=optimizer.ledger)
  q = BATCH / n
  steps = -np.diff(np.stack(trace.snapshots), axis=0)[:, 1:] * (
      q * n / (LEARNING_RATE * CLIP))
  ratio = tf_dp.analysis.one_run_audit(
      likelihood_ratio_scores(steps, q, noise), dirac.included, delta=DELTA)
  ideal_final, ideal_ratio = ideal_bounds(dirac.included, q, num_lots,
                                          noise, seed=300 + index)
  row = (epsilon, noise, num_lots, white.one_run.epsilon_lower_bound,
         ratio.epsilon_lower_bound, *ideal_final, *ideal_ratio,
         black_report.one_run.epsilon_lower_bound, acc_base, acc_audit,
         t_base[0], t_audit[0], t_base[1], t_audit[1],
         black.num_included + dirac.num_included)
  print("%10.3f  %5.3f  %4d  %11.3f  %8.3f  %6.3f+-%.3f  %5.3f+-%.3f  "
        "%5.3f  %8.4f  %9.4f  %6.0f  %7.0f  %7.1f  %8.1f  %8d" % row,
        flush=True)
  print(f"#   white final: {white.one_run}")
  print(f"#   white lr:    {ratio}")
  print(f"#   black:       {black_report.one_run} (AUC "
        f"{black_report.auc:.3f})", flush=True)
  return row, mixed, dirac, noise


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--epochs", type=float, default=5.0)
  parser.add_argument("--canaries", type=int, default=5000,
                      help="Canaries of each kind (at most 5000).")
  parser.add_argument("--epsilons", default="1,2,4,8")
  parser.add_argument("--train_examples", type=int, default=60000)
  parser.add_argument("--quick", action="store_true",
                      help="6000 examples, 500 canaries, 1 epoch, eps 2 and 8.")
  args = parser.parse_args()
  if args.quick:
    args.train_examples, args.canaries, args.epsilons = 6000, 500, "2,8"
    args.epochs = 1.0
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tf_dp  # pylint: disable=g-import-not-at-top
  sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
      os.path.abspath(__file__))), "tutorials"))
  from mnist_dpsgd_keras import build_cnn  # pylint: disable=g-import-not-at-top
  keras = tf.keras
  (x, y), (xt, yt) = tf_dp.data.load_mnist()
  x = (x[:args.train_examples, ..., None] / 255.0).astype("float32")
  y = y[:args.train_examples].astype("int32")
  xt = (xt[..., None] / 255.0).astype("float32")
  yt = yt.astype("int32")
  test, pool = (xt[:5000], yt[:5000]), (xt[5000:], yt[5000:])
  m = args.canaries
  print(f"# MNIST {len(x)} examples, main job's CNN (Keras 3), batch {BATCH} "
        f"(Poisson), clip {CLIP}, SGD {LEARNING_RATE}, {args.epochs:g} "
        f"epoch(s), delta {DELTA:g}, 95% confidence; {m} Dirac + {m} "
        f"mislabeled canaries per audited run")
  print("ledger_eps  noise  lots  white_final  white_lr   ideal_final  "
        "   ideal_lr  black  acc_base  acc_audit  s_base  s_audit  ms_base  "
        "ms_audit  included")
  summary = []
  for i, target in enumerate(float(e) for e in args.epsilons.split(",")):
    row, mixed, dirac, noise = audit_at(keras, tf_dp, build_cnn, x, y, test,
                                        pool, m, args.epochs, target, i)
    summary.append(f"eps{target:g}=" + "/".join(
        f"{v:.2f}" for v in (row[3], row[4], row[9])))
  cost = timing(keras, tf_dp, build_cnn, x, y, mixed, dirac, noise)
  print(f"# timing (alternating fits of 60 lots, median of 9 rounds): "
        f"base {cost['base']:.1f} ms/lot, audited {cost['audited']:.1f} "
        f"ms/lot ({cost['audited'] / cost['base']:.2f}x), audited with the "
        f"per-lot table trace {cost['audited+trace']:.1f} ms/lot")
  print("one_run_audit " + " ".join(summary) +
        f" cost={cost['audited'] / cost['base']:.2f}")


if __name__ == "__main__":
  main()
