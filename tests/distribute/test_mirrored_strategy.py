"""DP-SGD under MirroredStrategy (2 logical CPU devices) and
MultiWorkerMirroredStrategy (2 local workers on 127.0.0.1).

Each case runs in subprocesses (logical devices must be configured before
TensorFlow initialises; workers are processes): every record is clipped once, the clipped sums of
the replicas are added, noise is added once per global batch, the ledger
holds one sample per global step, and the replicas stay identical.
"""

import functools
import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from tests.keras import helpers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
FLAVORS = [p.id for p in helpers.keras_modules()]


WORKER = os.path.join(ROOT, "tests", "distribute", "mirrored_worker.py")


def _env():
  return dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3")


@functools.lru_cache(maxsize=None)
def _worker_results(flavor, modes):
  out = subprocess.run([sys.executable, WORKER, flavor, modes],
                       capture_output=True, text=True, env=_env(),
                       check=False, timeout=900)
  assert out.returncode == 0, out.stderr[-3000:]
  return json.loads(out.stdout.strip().splitlines()[-1])


# The MirroredStrategy cases (on two replicas, and on one) share one
# process per flavour (TensorFlow's start-up is most of a case's time).
TWO_REPLICA_MODES = ("exact,microbatches,neighbour,noise,user4,user3,"
                     "correlated,correlated_noise,sampled_poisson_loop,"
                     "sampled_fixed_users_loop,one_replica")


# --stack-share runs a flavour's MirroredStrategy cases on one stack, so
# that one worker process serves them all (tests/conftest.py).
TWO_REPLICAS = pytest.mark.share_group("tests/distribute two replicas")


def run_worker(flavor, mode):
  modes = TWO_REPLICA_MODES if mode in TWO_REPLICA_MODES.split(",") else mode
  return _worker_results(flavor, modes)[mode]


def _free_ports(count):
  sockets = [socket.socket() for _ in range(count)]
  for s in sockets:
    s.bind(("127.0.0.1", 0))
  ports = [s.getsockname()[1] for s in sockets]
  for s in sockets:
    s.close()
  return ports


# The multi-worker cases of a flavour share one pair of worker processes;
# the refusal comes last. Both flavours train by fit and by a custom loop
# around private_step (Keras 3's own fit needs tf_dp's adapter under
# MultiWorkerMirroredStrategy on TF 2.21: it reduces its first batch and
# its scalar logs across workers in ways the strategy refuses).
SAMPLED_KINDS = ("poisson", "fixed", "poisson_users", "fixed_users")
# (kind, route) pairs: fit on every kind; the loop on one kind of each
# unit (the parts a loop reads are the same distribute_lots output).
SAMPLED_RUNS = ([(k, "fit") for k in SAMPLED_KINDS]
                + [("poisson", "loop"), ("fixed_users", "loop")])
# Noise once per lot: the default noise by fit, secure mode by a loop.
NOISE_RUNS = (("sampled_noise", "fit"), ("secure_noise", "loop"))
_MODES = (["exact", "noise", "shared_key"]
          + [f"sampled_{k}_{r}" for k, r in SAMPLED_RUNS]
          + [f"{n}_{r}" for n, r in NOISE_RUNS]
          + ["resume_fit", "auto_sharded", "poisson"])
MULTI_WORKER_MODES = ",".join(_MODES)
@functools.lru_cache(maxsize=None)
def _two_worker_results(flavor, modes):
  ports = [str(p) for p in _free_ports(2)]
  procs = [subprocess.Popen([sys.executable, WORKER, flavor, modes, *ports,
                             str(i)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env())
           for i in range(2)]
  results = []
  for p in procs:
    stdout, stderr = p.communicate(timeout=900)
    assert p.returncode == 0, stderr[-3000:]
    results.append(json.loads(stdout.strip().splitlines()[-1]))
  return results


def run_two_workers(flavor, mode):
  return [worker[mode] for worker in _two_worker_results(
      flavor, MULTI_WORKER_MODES)]


@TWO_REPLICAS
@pytest.mark.parametrize("flavor", FLAVORS)
def test_mirrored_step_equals_per_example_loop(flavor):
  result = run_worker(flavor, "exact")
  assert result["replicas"] == 2
  assert result["max_abs_error"] < 1e-6


@TWO_REPLICAS
@pytest.mark.parametrize("flavor", FLAVORS)
def test_mirrored_strategy_with_one_replica_equals_per_example_loop(flavor):
  # A single-GPU machine's MirroredStrategy: the DP step still merges in
  # cross-replica context (the noise counter and ledger are its variables).
  result = run_worker(flavor, "one_replica")
  assert result["replicas"] == 1
  assert result["max_abs_error"] < 1e-6


@TWO_REPLICAS
@pytest.mark.parametrize("flavor", FLAVORS)
def test_num_microbatches_counts_microbatches_of_the_global_batch(flavor):
  # num_microbatches=4 on 2 replicas: 4 records of 2 examples in all (each
  # replica splits its 4 examples in 2), as without a strategy.
  result = run_worker(flavor, "microbatches")
  assert result["replicas"] == 2
  assert result["max_abs_error"] < 1e-6
  assert result["examples_per_record"] == pytest.approx(2.0)


@TWO_REPLICAS
@pytest.mark.parametrize("flavor", FLAVORS)
def test_mirrored_neighbour_moves_the_clipped_sum_by_at_most_2c(flavor):
  result = run_worker(flavor, "neighbour")
  assert result["replicas"] == 2
  # The replaced example is clipped on its replica: 2C, float32 rounding.
  assert result["sum_change"] <= result["bound"] * (1 + 1e-4)
  assert result["sum_change"] > 0.5 * result["bound"]


@TWO_REPLICAS
@pytest.mark.parametrize("flavor", FLAVORS)
def test_mirrored_noise_once_per_global_batch(flavor):
  # As in the single-device test: 96 steps x 30 kernel entries, tolerance
  # 8% (6.1 sd). Noise added per replica would give sqrt(2) x the stddev;
  # noise added by no replica would give 0.
  result = run_worker(flavor, "noise")
  deltas = np.array(result["deltas"])
  assert deltas.shape == (96, 30)
  assert np.std(deltas) == pytest.approx(result["expected_stddev"], rel=0.08)
  assert result["ledger_samples"] == 96
  assert result["replica_copies"] == 2 and result["replicas_equal"]


@TWO_REPLICAS
@pytest.mark.parametrize("flavor", FLAVORS)
def test_mirrored_user_lots_clip_each_user_once(flavor):
  """privacy_unit="user" on 2 replicas: a fixed-size lot of 4 users of 3
  rows (12 rows, the user's examples then padding of weight 0).

  The strategy (``experimental_distribute_dataset``, which Keras's fit
  uses) splits each global batch along its rows into one part per replica,
  consecutive and in order: rows 0-5 and 6-11, users 0-1 and 2-3. Each
  replica reads every 3 consecutive rows of its part as one user, so with
  users a multiple of the replicas no user is split and each user's summed
  gradient is clipped once. Against the per-user loop (noise 0, SGD(1),
  update x 4 users = the clipped sum; clip 0.05 binds): equal to float32
  rounding; the ledger holds one sample over the 12 users, q = 4/12.
  """
  result = run_worker(flavor, "user4")
  assert result["replicas"] == 2
  assert result["error"] is None
  assert result["rows"] == 12 and result["replica_rows"] == [6, 6]
  assert result["parts_in_order"]
  assert result["max_abs_error"] < 1e-6
  assert result["ledger"] == [["user", 12, pytest.approx(4 / 12)]]


@TWO_REPLICAS
@pytest.mark.parametrize("flavor", FLAVORS)
def test_mirrored_user_lots_that_split_a_user_are_refused(flavor):
  """A lot of 3 users (9 rows) on 2 replicas would be split 5 | 4 rows:
  user 1's rows 3-5 straddle the replicas, and clipping each part's rows
  as users would clip user 1 once per replica. Refused before any step,
  naming the fix (a multiple of 2 users per batch)."""
  result = run_worker(flavor, "user3")
  assert result["rows"] == 9
  assert result["error"].startswith("SamplingMismatchError: ")
  assert "strategy of 2 replicas" in result["error"]
  assert "users_per_batch" in result["error"]
  assert "a multiple of 2 users" in result["error"]
  assert result["moved"] == 0.0 and result["ledger"] == []


@TWO_REPLICAS
@pytest.mark.parametrize("flavor", FLAVORS)
def test_mirrored_correlated_noise_fit_steps_are_dp_sgds(flavor):
  """noise_strategy (banded, 6 steps, 3 bands) on 2 replicas, fit on 24
  examples in order, batches of 8, noise 0: every step's weights equal
  plain DP-SGD's under the same strategy, the first step equals the
  per-example loop's, and the ledger's record holds the 3 steps of one
  pass."""
  result = run_worker(flavor, "correlated")
  assert result["replicas"] == 2 and result["error"] is None
  assert result["steps"] == 3
  assert result["max_error_vs_dp_sgd"] < 1e-7
  assert result["max_error_vs_loop"] < 1e-6
  assert result["record"] == {"steps_run": 3, "passes": 1,
                              "min_separation": None,
                              "inconsistent_steps": 0}
  assert result["ledger_samples"] == 3


@TWO_REPLICAS
@pytest.mark.parametrize("flavor", FLAVORS)
def test_mirrored_correlated_noise_is_added_once_per_step(flavor):
  """Zero data (the clipped sums are the same on every run), banded
  strategy of 96 steps and 4 bands, sigma 1.5: the spread of 96 steps x 30
  kernel updates on 2 replicas equals the spread without a strategy in
  the same process. Noise (or its state) once per replica would give
  sqrt(2) x the spread or more; tolerance 15% (steps are correlated over
  4 bands: about 4 sd of the ratio of two spreads of 40 steps, 6 sd of
  96; the noise comes from OS entropy, fresh in every run)."""
  result = run_worker(flavor, "correlated_noise")
  assert result["strategy_steps"] == result["default_steps"] == 96
  assert result["default"] > 0
  assert result["strategy"] == pytest.approx(result["default"], rel=0.15)

@pytest.mark.slow
@pytest.mark.parametrize("flavor", FLAVORS)
def test_multi_worker_step_equals_per_example_loop(flavor):
  for result in run_two_workers(flavor, "exact"):
    assert result["replicas"] == 2
    assert result["max_abs_error"] < 1e-6


@pytest.mark.slow
@pytest.mark.parametrize("flavor", FLAVORS)
def test_multi_worker_noise_once_per_global_batch(flavor):
  chief, other = run_two_workers(flavor, "noise")
  deltas = np.array(chief["deltas"])
  assert np.std(deltas) == pytest.approx(chief["expected_stddev"], rel=0.08)
  assert chief["ledger_samples"] == other["ledger_samples"] == 96
  np.testing.assert_array_equal(chief["kernel"], other["kernel"])


@pytest.mark.slow
@pytest.mark.parametrize("flavor", FLAVORS)
def test_multi_worker_refuses_lots_it_cannot_redraw(flavor):
  """Poisson lots marked with declare_sampling: each worker would iterate
  its own copy, and a global step would join parts of different draws.
  Refused before any step, naming the fix."""
  for result in run_two_workers(flavor, "poisson"):
    assert result["refusal"] is not None
    assert "over 2 workers" in result["refusal"]
    assert "cannot be redrawn" in result["refusal"]
    assert "distribute_lots" in result["refusal"]
    assert result["ledger_samples"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("flavor", FLAVORS)
def test_multi_worker_auto_sharding_of_a_samplers_lots_fails(flavor):
  """A sampler's dataset given to experimental_distribute_dataset over 2
  workers: each worker would split its own draw, so a step's parts would
  come from different lots. The dataset allows sharding by file only, and
  has no files: tf.data refuses it (distribute_lots is the route)."""
  for result in run_two_workers(flavor, "auto_sharded"):
    assert result["refusal"] is not None
    assert "shardable source" in result["refusal"]


@pytest.mark.slow
@pytest.mark.parametrize("flavor", FLAVORS)
def test_multi_worker_lots_are_drawn_from_the_chiefs_key(flavor):
  """Each worker's own key (OS entropy) differs; the key its lots are
  drawn from is replica 0's, on both workers."""
  chief, other = run_two_workers(flavor, "shared_key")
  assert chief["own"] != other["own"]
  assert chief["shared"] == other["shared"] == chief["own"]


@pytest.mark.slow
@pytest.mark.parametrize("kind,route", SAMPLED_RUNS)
@pytest.mark.parametrize("flavor", FLAVORS)
def test_multi_worker_sampled_lots_equal_the_one_process_run(flavor, kind,
                                                             route):
  """Poisson, fixed-size, Poisson-user and fixed-size-user lots (fixed
  seed, 3 lots of 2 batches, gradient accumulation) over 2 workers, by
  fit and by a custom loop around private_step over distribute_lots: the
  weights equal the one-process custom loop's over one pass of the
  sampler's lots (noise 0, clip 0.05 binds; float32 rounding of a sum
  split in two): the first pass for the loop, the first or a later one
  for fit (Keras may iterate a dataset before training; each iteration
  draws fresh lots). The same on both workers, and the ledger holds the
  same 3 samples (n and q of the whole population)."""
  for result in run_two_workers(flavor, f"sampled_{kind}_{route}"):
    assert result["error"] is None
    if route == "loop":
      assert result["pass"] == 0
    assert result["moved"] > 1e-3
    assert result["max_abs_error"] < 1e-6
    assert len(result["ledger"]) == 3
    assert result["ledger"] == result["reference_ledger"]
  chief, other = run_two_workers(flavor, f"sampled_{kind}_{route}")
  assert chief["kernel"] == other["kernel"]


@pytest.mark.slow
@pytest.mark.parametrize("noise,route", NOISE_RUNS)
@pytest.mark.parametrize("flavor", FLAVORS)
def test_multi_worker_poisson_noise_once_per_global_lot(flavor, noise,
                                                        route):
  """96 Poisson lots of zero inputs over 2 workers, default noise and
  secure_mode (every worker draws from its own OS entropy; the chief's
  draw is sent to all): the first kernel's updates are the noise alone, of
  sd C z / (q n) = 0.3 if noise is added once per global lot (sqrt(2) x
  with noise per worker, 0 with none); 2880 updates, tolerance 8% (6 sd).
  Both workers hold the same weights (with a draw per worker they would
  differ); 96 ledger samples."""
  chief, other = run_two_workers(flavor, f"{noise}_{route}")
  assert chief["steps"] == 96 and chief["ledger_samples"] == 96
  assert chief["deltas_std"] == pytest.approx(chief["expected_stddev"],
                                              rel=0.08)
  assert chief["kernel"] == other["kernel"]


@pytest.mark.slow
@pytest.mark.parametrize("flavor", FLAVORS)
def test_multi_worker_run_resumes_from_a_checkpoint(flavor):
  """3 Poisson lots over 2 workers by fit, a checkpoint (every worker
  writes, the chief's file counts), then new models restored from it,
  over the 2 workers and in one process (another worker count), each
  training 3 more lots: the weights are restored exactly, and the ledger
  holds the 3 saved samples unchanged, then the 3 new ones."""
  for result in run_two_workers(flavor, "resume_fit"):
    assert result["saved"] == 3
    for where in ("workers", "one_process"):
      assert result[f"{where}_restored_weights_error"] == 0.0
      assert result[f"{where}_restored_samples"] == 3
      assert result[f"{where}_samples_after"] == 6
      assert result[f"{where}_prefix_kept"]


@TWO_REPLICAS
@pytest.mark.parametrize("kind", ["poisson", "fixed_users"])
@pytest.mark.parametrize("flavor", FLAVORS)
def test_distribute_lots_on_two_local_replicas(flavor, kind):
  """distribute_lots under MirroredStrategy (one input pipeline feeding 2
  replicas, each its part of every batch): the custom loop equals the
  one-process loop over the same lots."""
  result = run_worker(flavor, f"sampled_{kind}_loop")
  assert result["replicas"] == 2
  assert result["error"] is None
  assert result["max_abs_error"] < 1e-6
  assert result["ledger"] == result["reference_ledger"]
