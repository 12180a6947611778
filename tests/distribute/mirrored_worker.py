"""Runs DP training under a distribution strategy (in a subprocess).

Prints one JSON line with the measured quantities; see
test_mirrored_strategy.py. Usage:

  mirrored_worker.py keras3|keras2 exact|noise           # MirroredStrategy,
                                                         # 2 logical CPUs
  mirrored_worker.py keras3|keras2 one_replica|microbatches|neighbour
      # one replica on the first logical CPU (one_replica), or 2 with
      # num_microbatches=4 (microbatches) or one example replaced, noise 0
      # (neighbour)
  mirrored_worker.py keras3|keras2 user4|user3|correlated|correlated_noise
      # 2 logical CPUs: a user-level step on a lot of 4 (3) users, a
      # correlated-noise fit with noise 0, its noise's spread
  mirrored_worker.py keras3|keras2 sampled_KIND_ROUTE
      # 2 logical CPUs: lots of a sampler (KIND: poisson, fixed,
      # poisson_users, fixed_users) by ROUTE (fit, or loop: private_step
      # over distribute_lots) against the one-process loop
  mirrored_worker.py keras3|keras2 MODES PORT0 PORT1 INDEX
      # MultiWorkerMirroredStrategy: worker INDEX of 2 on 127.0.0.1; MODES
      # among exact, noise, shared_key, sampled_KIND_ROUTE and poisson (a
      # dataset declared by hand: refused)

Modes joined by commas run one after the other in the same process (on
the same strategy, except one_replica's), as TensorFlow's start-up is most
of a mode's time; both workers of a multi-worker run take the same modes in
the same order.
"""

import json
import os
import sys
import tempfile

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
  one_replica_strategy = None
else:
  strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
  # A single-GPU machine's MirroredStrategy, next to the 2-replica one.
  one_replica_strategy = tf.distribute.MirroredStrategy(["/cpu:0"])


def fit_data(x, y, batch):
  """Multi-worker training reads a tf.data pipeline (global batches, sharded
  by Keras across workers), shuffled before batching as "shuffled" lots
  must be, with one seed so that every worker draws the same order;
  single-host training takes the arrays."""
  if not MULTI_WORKER:
    return (x, y, batch)
  return (tf.data.Dataset.from_tensor_slices((x, y)).shuffle(
      len(x), seed=0).batch(batch), None, None)


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


def run_user_level(users_per_batch):
  """One noise-free step on a fixed-size lot of ``users_per_batch`` users
  (3 rows each) against the per-user loop, or the error fit raised."""
  from tests.keras import users as user_tests  # pylint: disable=g-import-not-at-top
  k = user_tests.K_ROWS
  x, y, ids = user_tests.user_data()
  lot = next(iter(tf_dp.data.fixed_size_sampled_users(
      x, y, ids, users_per_batch, 1, k, seed=3)))
  xb, yb, wb = (np.asarray(t) for t in lot)
  # The sampler's lot, replayed: the reference needs the rows fit sees.
  lots = lambda: tf_dp.data.declare_sampling(
      tf.data.Dataset.from_tensors(lot), "fixed_size", population_size=12,
      privacy_unit="user", max_examples_per_user=k)
  result = {"rows": len(xb)}
  # How the strategy hands the batch to its replicas.
  parts = strategy.experimental_local_results(next(iter(
      strategy.experimental_distribute_dataset(lots())))[0])
  result["replica_rows"] = [int(p.shape[0]) for p in parts]
  result["parts_in_order"] = bool(np.array_equal(
      np.concatenate([np.asarray(p) for p in parts]), xb))
  with strategy.scope():
    model = tf_dp.keras.make_private(helpers.build_model(K, "dense"))
    model.compile(optimizer=tf_dp.DPOptimizer(
        K.optimizers.SGD(1.0), l2_norm_clip=0.05, noise_multiplier=0.0,
        population_size=12, sampling="fixed_size", privacy_unit="user",
        max_examples_per_user=k),
        loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  expected = user_tests.clipped_user_sum(model, xb, yb, wb, 0.05)
  before = [np.asarray(v.numpy(), np.float64)
            for v in model.trainable_variables]
  try:
    model.fit(lots(), epochs=1, verbose=0)
    result["error"] = None
  except Exception as e:  # pylint: disable=broad-except
    result["error"] = f"{type(e).__name__}: {e}"[:3000]
  after = [np.asarray(v.numpy(), np.float64)
           for v in model.trainable_variables]
  result["max_abs_error"] = float(max(np.max(np.abs(
      (b - a) * users_per_batch - e)) for a, b, e in zip(after, before,
                                                        expected)))
  result["moved"] = float(max(np.max(np.abs(a - b))
                              for a, b in zip(after, before)))
  result["user_rows"] = user_tests.K_ROWS
  samples = model.optimizer.ledger.to_dict()["samples"]
  result["ledger"] = [[s["privacy_unit"], s["population_size"],
                       s["sampling_probability"]] for s in samples]
  return result


# The sampled lots every worker draws: (sampler, its arguments, optimizer's
# sampling arguments). 2 lots of 2 batches each (gradient accumulation);
# fixed seeds, so that a run on one process draws the same lots.
def sampled_lots(kind):
  from tests.keras import users as user_tests  # pylint: disable=g-import-not-at-top
  if kind == "poisson":
    x, y = helpers.make_data("dense", 40, seed=1)
    lots = tf_dp.data.poisson_sampled_batches(x, y, 0.3, 3, seed=5,
                                              batches_per_lot=2)
    dp = dict(population_size=40, sampling="poisson",
              sampling_probability=0.3)
  elif kind == "fixed":
    x, y = helpers.make_data("dense", 40, seed=1)
    lots = tf_dp.data.fixed_size_sampled_batches(x, y, 6, 3, seed=5,
                                                 batches_per_lot=2)
    dp = dict(population_size=40, sampling="fixed_size")
  elif kind == "poisson_users":
    x, y, ids = user_tests.user_data(users=20)
    lots = tf_dp.data.poisson_sampled_users(
        x, y, ids, 0.4, 3, user_tests.K_ROWS, seed=5, batches_per_lot=2)
    dp = dict(population_size=20, sampling="poisson",
              sampling_probability=0.4, privacy_unit="user",
              max_examples_per_user=user_tests.K_ROWS)
  else:  # fixed_users
    x, y, ids = user_tests.user_data(users=20)
    lots = tf_dp.data.fixed_size_sampled_users(
        x, y, ids, 4, 3, user_tests.K_ROWS, seed=5, batches_per_lot=2)
    dp = dict(population_size=20, sampling="fixed_size", privacy_unit="user",
              max_examples_per_user=user_tests.K_ROWS)
  return lots, dict(dp, gradient_accumulation_steps=2)


def train_on_lots(kind, route, scope, one_pass=0):
  """Weights and ledger after training on ``sampled_lots(kind)`` under
  ``scope`` (a strategy), by ``fit`` or by a custom loop around
  ``private_step`` (over ``distribute_lots`` under a strategy); a
  one-process loop trains on the sampler's pass ``one_pass`` (0: its
  first iteration)."""
  model, optimizer = build_on_lots(kind, route, scope)
  continue_on_lots(model, optimizer, kind, route, scope, one_pass)
  return ([np.asarray(v.numpy(), np.float64)
           for v in model.trainable_variables],
          optimizer.ledger.to_dict()["samples"])


def run_sampled(kind, route):
  """A multi-worker run on sampled lots (by ``route``) against one-process
  custom loops over the sampler's passes (noise 0): the run must equal
  the loop over one pass, the same global lots. A custom loop over
  ``distribute_lots`` reads the first pass; ``fit`` may read a later one
  (Keras may iterate a dataset before training, as Keras 3 does to build
  the model under a strategy: each iteration draws fresh lots)."""
  out = {}
  try:
    got, ledger = train_on_lots(kind, route, strategy)
    out["error"] = None
  except Exception as e:  # pylint: disable=broad-except
    out["error"] = f"{type(e).__name__}: {e}"[:3000]
    return out
  errors = []
  for one_pass in range(3):
    reference, reference_ledger = train_on_lots(
        kind, "loop", tf.distribute.get_strategy(), one_pass)
    errors.append(float(max(np.max(np.abs(a - b))
                            for a, b in zip(reference, got))))
    if errors[-1] < 1e-6:
      break
  out["max_abs_error"] = errors[-1]
  out["pass"] = len(errors) - 1
  out["moved"] = float(max(np.max(np.abs(a - b)) for a, b in zip(
      got, train_initial_weights())))
  out["ledger"] = ledger
  out["reference_ledger"] = reference_ledger
  out["kernel"] = got[0].ravel().tolist()
  return out


def build_on_lots(kind, route, scope):
  """A private model and its DP optimizer under ``scope`` for
  ``sampled_lots(kind)``, compiled for ``fit`` routes."""
  _, dp = sampled_lots(kind)
  with scope.scope():
    model = tf_dp.keras.make_private(helpers.build_model(K, "dense"))
    optimizer = tf_dp.DPOptimizer(K.optimizers.SGD(1.0), l2_norm_clip=0.05,
                                  noise_multiplier=0.0, **dp)
    if route == "fit":
      model.compile(optimizer=optimizer, loss=K.losses.
                    SparseCategoricalCrossentropy(from_logits=True))
  return model, optimizer


def continue_on_lots(model, optimizer, kind, route, scope, one_pass=0):
  """Trains ``model`` on ``sampled_lots(kind)`` under ``scope`` (see
  ``train_on_lots``)."""
  import warnings  # pylint: disable=g-import-not-at-top
  lots, _ = sampled_lots(kind)
  loss = K.losses.SparseCategoricalCrossentropy(from_logits=True)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # fixed seeds, noise 0
    if route == "fit":
      model.fit(lots, epochs=1, verbose=0)
      return
    step = tf.function(lambda x, y, w=None: optimizer.private_step(
        model, loss, x, y, sample_weight=w))
    if scope is tf.distribute.get_strategy():
      for _ in range(one_pass):
        list(lots)  # An earlier pass: each iteration draws fresh lots.
      for batch in lots:
        step(*batch)
    else:
      for batch in tf_dp.data.distribute_lots(scope, lots):
        scope.run(step, args=batch)


def run_sampled_noise(route, secure=False):
  """Kernel updates of 96 Poisson lots of zero inputs (the first kernel's
  gradients are 0: its updates are the noise alone) over the strategy,
  with the default noise or ``secure_mode``."""
  import warnings  # pylint: disable=g-import-not-at-top
  n, q, clip, z = 960, 10 / 960, 2.0, 1.5
  x = np.zeros((n, 6), "float32")
  y = np.zeros((n,), "int32")
  with strategy.scope():
    model = tf_dp.keras.make_private(helpers.build_model(K, "dense"))
    optimizer = tf_dp.DPOptimizer(
        K.optimizers.SGD(1.0), l2_norm_clip=clip, noise_multiplier=z,
        population_size=n, sampling="poisson", sampling_probability=q,
        secure_mode=secure)
    if route == "fit":
      model.compile(optimizer=optimizer, loss=K.losses.
                    SparseCategoricalCrossentropy(from_logits=True))
  kernel = model.trainable_variables[0]
  seen = [kernel.numpy().copy()]
  lots = tf_dp.data.poisson_sampled_batches(x, y, q, 96)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    if route == "fit":

      class Record(K.callbacks.Callback):

        def on_train_batch_end(self, batch, logs=None):
          seen.append(kernel.numpy().copy())

      model.fit(lots, epochs=1, verbose=0, callbacks=[Record()])
    else:
      loss = K.losses.SparseCategoricalCrossentropy(from_logits=True)
      step = tf.function(lambda x, y, w: optimizer.private_step(
          model, loss, x, y, sample_weight=w))
      for batch in tf_dp.data.distribute_lots(strategy, lots):
        strategy.run(step, args=batch)
        seen.append(kernel.numpy().copy())
  deltas = np.array([(b - a).ravel() for a, b in zip(seen, seen[1:])])
  return {"deltas_std": float(np.std(deltas)), "steps": len(deltas),
          "expected_stddev": clip * z / (q * n),
          "ledger_samples": int(optimizer.ledger.sample_count.numpy()),
          "kernel": seen[-1].ravel().tolist()}


def run_resume(route):
  """Train 3 Poisson lots over the workers, checkpoint, restore into new
  models over the workers and in one process (another worker count), and
  continue: the ledgers continue the saved one."""
  weights = lambda m: [np.asarray(v.numpy(), np.float64)
                       for v in m.trainable_variables]
  task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
  shared = os.path.join(tempfile.gettempdir(),
                        f"tf_dp_resume_{sys.argv[3]}_{route}")
  first, first_optimizer = build_on_lots("poisson", route, strategy)
  continue_on_lots(first, first_optimizer, "poisson", route, strategy)
  saved = first_optimizer.ledger.to_dict()["samples"]
  # Every worker writes (a collective); the chief's file is the checkpoint.
  target = shared if task == 0 else tempfile.mkdtemp()
  path = tf.train.Checkpoint(model=first, optimizer=first_optimizer).write(
      os.path.join(target, "ckpt"))
  chief_path = os.path.join(shared, "ckpt")
  del path
  out = {"saved": len(saved)}
  for name, scope in (("workers", strategy),
                      ("one_process", tf.distribute.get_strategy())):
    model, optimizer = build_on_lots("poisson", route, scope)
    with scope.scope():
      status = tf.train.Checkpoint(model=model,
                                   optimizer=optimizer).read(chief_path)
    restored_ledger = optimizer.ledger.to_dict()["samples"]
    out[name + "_restored_weights_error"] = float(max(
        np.max(np.abs(a - b)) for a, b in zip(weights(first),
                                              weights(model))))
    continue_on_lots(model, optimizer, "poisson", route, scope)
    status.assert_existing_objects_matched()
    after = optimizer.ledger.to_dict()["samples"]
    out[name + "_restored_samples"] = len(restored_ledger)
    out[name + "_samples_after"] = len(after)
    out[name + "_prefix_kept"] = after[:len(saved)] == saved
  return out


def train_initial_weights():
  return [np.asarray(v.numpy(), np.float64) for v in
          helpers.build_model(K, "dense").trainable_variables]


def run_auto_sharded():
  """A sampler's dataset given to experimental_distribute_dataset (each
  worker would split its own draw): refused by tf.data's auto-sharding."""
  x, y = helpers.make_data("dense", 40, seed=1)
  lots = tf_dp.data.poisson_sampled_batches(x, y, 0.3, 2)
  try:
    next(iter(strategy.experimental_distribute_dataset(lots)))
    return {"refusal": None}
  except Exception as e:  # pylint: disable=broad-except
    return {"refusal": f"{type(e).__name__}: {e}"[:500]}


def run_shared_key():
  from tf_dp.data import distributed  # pylint: disable=g-import-not-at-top
  from tf_dp.data import lots as lots_lib  # pylint: disable=g-import-not-at-top
  own = lots_lib.random_key()
  return {"own": str(own), "shared": str(distributed.shared_key(strategy,
                                                                own))}


def correlated_model(z, clip=0.01, scope=None, **dp):
  with (scope or strategy).scope():
    model = tf_dp.keras.make_private(helpers.build_model(K, "dense"))
    model.compile(optimizer=tf_dp.DPOptimizer(
        K.optimizers.SGD(1.0), l2_norm_clip=clip, noise_multiplier=z,
        population_size=24, **dp),
        loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  return model


def weights_per_step(model, x, y, batch, epochs=1):
  seen = [[np.asarray(v.numpy(), np.float64)
           for v in model.trainable_variables]]

  class Record(K.callbacks.Callback):

    def on_train_batch_end(self, batch, logs=None):
      seen.append([np.asarray(v.numpy(), np.float64)
                   for v in model.trainable_variables])

  model.fit(x, y, batch_size=batch, epochs=epochs, shuffle=False, verbose=0,
            callbacks=[Record()])
  return seen


def run_correlated():
  """Noise 0: a correlated-noise fit's steps against DP-SGD's and the
  per-example loop, and its ledger record."""
  from tf_dp.analysis import matrix_factorization as mf  # pylint: disable=g-import-not-at-top
  x, y = helpers.make_data("dense", 24, seed=1)
  result = {}
  model = correlated_model(0.0, noise_strategy=mf.banded_strategy(6, 3),
                           max_passes=2)
  try:
    seen = weights_per_step(model, x, y, 8)
    result["error"] = None
  except Exception as e:  # pylint: disable=broad-except
    result["error"] = f"{type(e).__name__}: {e}"[:2000]
    return result
  plain = weights_per_step(correlated_model(0.0, sampling="fixed_order"), x,
                           y, 8)
  result["steps"] = len(seen) - 1
  result["max_error_vs_dp_sgd"] = float(max(
      np.max(np.abs(a - b)) for s, p in zip(seen, plain)
      for a, b in zip(s, p)))
  with strategy.scope():
    reference_model = helpers.build_model(K, "dense")
  expected = helpers.reference_update(reference_model, x[:8], y[:8],
                                      clip=0.01, lr=1.0)
  result["max_error_vs_loop"] = float(max(
      np.max(np.abs(a - b)) for a, b in zip(expected, seen[1])))
  data = model.optimizer.ledger.to_dict()
  result["record"] = {key: data["correlated_noise"][key] for key in
                      ("steps_run", "passes", "min_separation",
                       "inconsistent_steps")}
  result["ledger_samples"] = len(data["samples"])
  return result


def run_correlated_noise():
  """Updates' spread of a correlated-noise fit on zero data (the
  clipped sums are the same everywhere) under the strategy and without."""
  from tf_dp.analysis import matrix_factorization as mf  # pylint: disable=g-import-not-at-top
  n, batch = 960, 10
  x = np.zeros((n, 6), "float32")
  y = np.zeros((n,), "int32")
  spreads = {}
  kernel_deltas = lambda seen: np.array([
      (b[0] - a[0]).ravel() for a, b in zip(seen, seen[1:])])
  for name, scope in (("strategy", strategy),
                      ("default", tf.distribute.get_strategy())):
    model = correlated_model(1.5, clip=2.0, scope=scope,
                             noise_strategy=mf.banded_strategy(96, 4),
                             max_passes=1)
    seen = weights_per_step(model, x, y, batch)
    spreads[name] = float(np.std(kernel_deltas(seen)))
    spreads[name + "_steps"] = len(seen) - 1
  return spreads


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
    # Poisson lots declared by hand over 2 workers: refused before any step.
    x, y = helpers.make_data("dense", 40, seed=1)
    with strategy.scope():
      model = tf_dp.keras.make_private(helpers.build_model(K, "dense"))
      model.compile(optimizer=tf_dp.DPOptimizer(
          K.optimizers.SGD(1.0), l2_norm_clip=1.0, noise_multiplier=1.0,
          population_size=len(x), sampling="poisson", sampling_probability=0.25),
          loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
    declared = tf_dp.data.declare_sampling(
        tf.data.Dataset.from_tensor_slices((x, y)).batch(10), "poisson",
        sampling_probability=0.25)
    try:
      model.fit(declared, verbose=0)
      out["refusal"] = None
    except ValueError as e:
      out["refusal"] = str(e)
    out["ledger_samples"] = int(model.optimizer.ledger.sample_count.numpy())
  elif mode.startswith("sampled_noise_"):
    out.update(run_sampled_noise(mode[len("sampled_noise_"):]))
  elif mode.startswith("secure_noise_"):
    out.update(run_sampled_noise(mode[len("secure_noise_"):], secure=True))
  elif mode.startswith("sampled_"):
    kind, route = mode[len("sampled_"):].rsplit("_", 1)
    out.update(run_sampled(kind, route))
  elif mode.startswith("resume_"):
    out.update(run_resume(mode[len("resume_"):]))
  elif mode == "auto_sharded":
    out.update(run_auto_sharded())
  elif mode == "shared_key":
    out.update(run_shared_key())
  elif mode.startswith("user"):
    out.update(run_user_level(int(mode[len("user"):])))
  elif mode == "correlated":
    out.update(run_correlated())
  elif mode == "correlated_noise":
    out.update(run_correlated_noise())
  else:
    n, batch, clip, z = 960, 10, 2.0, 1.5
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


# Several cases (comma-separated) share one process.
results = {}
two_replicas = strategy
for m in mode.split(","):
  strategy = one_replica_strategy if m == "one_replica" else two_replicas
  results[m] = run(m)
print(json.dumps(results))
