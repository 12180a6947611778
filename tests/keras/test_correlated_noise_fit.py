"""fit with DPOptimizer(noise_strategy=...): correlated noise across lots on
arrays in one fixed order, accounted from the participation run."""

import math
import warnings

import numpy as np
import pytest
import tensorflow as tf

import tf_dp
from tests.keras import helpers
from tf_dp.analysis import matrix_factorization as mf
from tf_dp.estimator import checkpoint_ledger
from tf_dp.errors import PrivacyError

KERAS = helpers.keras_modules()
N, BATCH = 24, 8          # 3 steps per pass


def _model(K, noise_multiplier=1.0, learning_rate=0.1, clip=1.0, **dp):
  model = tf_dp.keras.make_private(helpers.build_model(K, "dense"))
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)   # noise_multiplier=0
    optimizer = tf_dp.DPOptimizer(
        K.optimizers.SGD(learning_rate), l2_norm_clip=clip,
        noise_multiplier=noise_multiplier, population_size=N, **dp)
  model.compile(optimizer=optimizer,
                loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  return model


class _Weights:
  """Keeps the weights after every batch."""

  def __init__(self, K):
    outer = self

    class Callback(K.callbacks.Callback):

      def on_train_batch_end(self, batch, logs=None):
        outer.seen.append([w.copy() for w in self.model.get_weights()])

    self.seen = []
    self.callback = Callback()


def _fit(K, model, x, y, epochs, callbacks=(), **kwargs):
  weights = _Weights(K)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    model.fit(x, y, batch_size=BATCH, epochs=epochs, shuffle=False,
              verbose=0, callbacks=[weights.callback, *callbacks], **kwargs)
  return weights.seen


@pytest.mark.parametrize("K", KERAS)
def test_replacing_one_example_moves_only_its_steps_clipped_sum(K):
  # Noise 0, learning rate 1: a step's update times its BATCH records is
  # its clipped sum. Example 10 (step 1 of each pass) is replaced: step 0
  # is unchanged, step 1 moves by at most 2C.
  clip = 0.01
  x, y = helpers.make_data("dense", N)
  x2, y2 = x.copy(), y.copy()
  x2[10], y2[10] = -3.0 * x[10], (y[10] + 1) % 3
  strategy = mf.banded_strategy(6, 3)
  runs = []
  for data in ((x, y), (x2, y2)):
    model = _model(K, 0.0, learning_rate=1.0, clip=clip,
                   noise_strategy=strategy, max_passes=2)
    initial = [w.copy() for w in model.get_weights()]
    runs.append([initial] + _fit(K, model, *data, 1))

  def clipped_sum(run, step):
    return np.concatenate([(before - after).ravel() * BATCH for before, after
                           in zip(run[step], run[step + 1])])

  np.testing.assert_array_equal(clipped_sum(runs[0], 0),
                                clipped_sum(runs[1], 0))
  # Without noise the run is DP-SGD's: the same clipped sums and updates.
  plain = _model(K, 0.0, learning_rate=1.0, clip=clip,
                 sampling="fixed_order")
  for a, b in zip(runs[0][1:], _fit(K, plain, x, y, 1)):
    for wa, wb in zip(a, b):
      np.testing.assert_allclose(wa, wb, rtol=1e-6, atol=1e-7)
  moved = np.linalg.norm(clipped_sum(runs[0], 1) - clipped_sum(runs[1], 1))
  assert 0 < moved <= 2 * clip * (1 + 1e-5)


@pytest.mark.parametrize("K", KERAS)
def test_ledger_records_the_participation_run(K, tmp_path):
  x, y = helpers.make_data("dense", N)
  strategy = mf.banded_strategy(9, 3)
  model = _model(K, 1.5, noise_strategy=strategy, max_passes=3)
  _fit(K, model, x, y, 2)
  _fit(K, model, x, y, 1)      # a later fit continues after whole passes
  # The order run: example i at step i // BATCH of every pass.
  steps = {i: [e * 3 + i // BATCH for e in range(3)] for i in range(N)}
  passes = max(len(s) for s in steps.values())
  separation = min(b - a for s in steps.values() for a, b in zip(s, s[1:]))
  record = model.optimizer.ledger.to_dict()["correlated_noise"]
  assert (record["passes"], record["min_separation"]) == (passes, separation)
  assert record["steps_run"] == 9 and record["inconsistent_steps"] == 0
  assert len(model.optimizer.ledger.to_dict()["samples"]) == 9
  eps, _ = tf_dp.analysis.compute_epsilon_from_ledger(model.optimizer.ledger,
                                                      1e-5)
  sens = strategy.sensitivity(passes, separation)
  assert sens == pytest.approx(math.sqrt(3))
  assert eps == pytest.approx(mf.epsilon_of_mu(2 * sens / 1.5, 1e-5),
                              rel=1e-9)
  # Readers of independent Gaussian samples refuse the record.
  with pytest.raises(PrivacyError, match="correlated-noise"):
    tf_dp.analysis.compute_rdp_from_ledger(model.optimizer.ledger)
  # Its record would not be restored with the model: saving is refused.
  with pytest.raises(PrivacyError, match="cannot be saved"):
    model.save(str(tmp_path / "model.keras"))
  # save_weights to '.weights.h5' holds the optimizer too (both flavours):
  # the message names get_weights; Keras 2's legacy '.h5' leaves it out.
  with pytest.raises(PrivacyError, match="get_weights.*legacy '.h5'"):
    model.save_weights(str(tmp_path / "model.weights.h5"))
  if K.__name__ == "tf_keras":
    model.save_weights(str(tmp_path / "model.h5"))


def _history_written(path):
  """The noise-history variables in the TF checkpoint bundle ``path``."""
  return sorted(name for name, _ in tf.train.list_variables(path)
                if "/history/" in name)


@pytest.mark.parametrize("K", KERAS)
def test_no_file_holds_the_noise_state(K, tmp_path):
  """The correlated noise's state (the last noises added) never leaves the
  process: two consecutive files holding it would give away a clipped sum.
  No checkpoint, TF-format weights file or SavedModel holds it; the ledger
  is in each, whole (its epsilon read from the file is the run's)."""
  x, y = helpers.make_data("dense", N)
  model = _model(K, 1.5, noise_strategy=mf.banded_strategy(6, 3),
                 max_passes=2)
  _fit(K, model, x, y, 1)
  assert model.optimizer.dp_engine.global_state["grads"].history
  epsilon = tf_dp.analysis.compute_epsilon_from_ledger(
      model.optimizer.ledger, 1e-5)[0]
  files = {"checkpoint": tf.train.Checkpoint(
      model=model, optimizer=model.optimizer).write(str(tmp_path / "ck"))}
  tf.saved_model.save(model, str(tmp_path / "saved"))
  files["SavedModel"] = str(tmp_path / "saved" / "variables" / "variables")
  if K.__name__ != "keras":  # Keras 2: TF-format weights and SavedModel.
    model.save_weights(str(tmp_path / "weights"))
    files["weights"] = str(tmp_path / "weights")
    model.save(str(tmp_path / "keras2"))
    files["Keras 2 SavedModel"] = str(tmp_path / "keras2")
  for kind, path in files.items():
    if kind != "Keras 2 SavedModel":
      assert not _history_written(path), kind
    read = checkpoint_ledger.ledger_from_checkpoint(path)
    assert tf_dp.analysis.compute_epsilon_from_ledger(read, 1e-5)[0] == (
        pytest.approx(epsilon, rel=1e-12)), kind
  if K.__name__ != "keras":
    assert not _history_written(files["Keras 2 SavedModel"] + "/variables/"
                                "variables")
    K.models.load_model(files["Keras 2 SavedModel"])


@pytest.mark.parametrize("K", KERAS)
def test_a_restored_run_cannot_continue_its_correlated_noise(K, tmp_path):
  """A checkpoint holds no noise state, so a run restored from it in a new
  model refuses to continue (its ledger is whole); the same model, whose
  state stayed in memory, continues after restoring its latest
  checkpoint."""
  x, y = helpers.make_data("dense", N)
  strategy = mf.banded_strategy(6, 3)
  model = _model(K, 1.5, noise_strategy=strategy, max_passes=2)
  _fit(K, model, x, y, 1)
  path = tf.train.Checkpoint(model=model, optimizer=model.optimizer).write(
      str(tmp_path / "ck"))
  restored = _model(K, 1.5, noise_strategy=strategy, max_passes=2)
  tf.train.Checkpoint(model=restored, optimizer=restored.optimizer).read(path)
  assert restored.optimizer.ledger.to_dict() == (
      model.optimizer.ledger.to_dict())
  with pytest.raises(PrivacyError, match="records 3 steps but its noise "
                     "state is at step 0.*new tf_dp.DPOptimizer"):
    _fit(K, restored, x, y, 1)
  tf.train.Checkpoint(model=model, optimizer=model.optimizer).read(path)
  _fit(K, model, x, y, 1)
  assert model.optimizer.ledger.to_dict()["correlated_noise"][
      "steps_run"] == 6


@pytest.mark.parametrize("K", KERAS)
def test_fits_the_strategy_does_not_cover_are_refused_before_any_step(K):
  x, y = helpers.make_data("dense", N)
  model = _model(K, noise_strategy=mf.banded_strategy(6, 3), max_passes=2)
  before = [w.copy() for w in model.get_weights()]
  with pytest.raises(PrivacyError, match="shuffle=False"):
    model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0)
  with pytest.raises(PrivacyError, match="max_passes=2"):
    model.fit(x, y, batch_size=BATCH, epochs=3, shuffle=False, verbose=0)
  with pytest.raises(PrivacyError, match="order of a dataset"):
    model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH),
              epochs=1, verbose=0)
  with pytest.raises(PrivacyError, match="shorter than the strategy's 3"):
    model.fit(x, y, batch_size=12, epochs=2, shuffle=False, verbose=0)
  for w, b in zip(model.get_weights(), before):
    np.testing.assert_array_equal(w, b)
  _fit(K, model, x, y, 1)
  with pytest.raises(PrivacyError, match="3 steps per pass"):
    model.fit(x, y, batch_size=6, epochs=1, shuffle=False, verbose=0)
  with pytest.raises(PrivacyError, match="another order"):
    model.fit(x[::-1], y[::-1], batch_size=BATCH, epochs=1, shuffle=False,
              verbose=0)


def test_arguments_it_cannot_be_combined_with():
  K = KERAS[0].values[0]
  strategy = mf.banded_strategy(6, 3)
  with pytest.raises(ValueError, match="num_microbatches"):
    tf_dp.DPOptimizer(K.optimizers.SGD(0.1), 1.0, 1.0, population_size=N,
                      noise_strategy=strategy, num_microbatches=2)
  with pytest.raises(ValueError, match="sampling"):
    tf_dp.DPOptimizer(K.optimizers.SGD(0.1), 1.0, 1.0, population_size=N,
                      noise_strategy=strategy, sampling="poisson",
                      sampling_probability=0.1)
  with pytest.raises(ValueError, match="max_passes"):
    tf_dp.DPOptimizer(K.optimizers.SGD(0.1), 1.0, 1.0, population_size=N,
                      noise_strategy=mf.tree_strategy(16), max_passes=0)
  with pytest.raises(TypeError, match="noise_strategy must be"):
    tf_dp.DPOptimizer(K.optimizers.SGD(0.1), 1.0, 1.0, population_size=N,
                      noise_strategy="banded")


def test_config_round_trip_keeps_the_strategy():
  from tf_dp.core.config import DPConfig  # pylint: disable=g-import-not-at-top
  K = KERAS[0].values[0]
  strategy = mf.banded_strategy(6, 3)
  optimizer = tf_dp.DPOptimizer(K.optimizers.SGD(0.1), 1.0, 1.0,
                                population_size=N, noise_strategy=strategy,
                                max_passes=2)
  config = optimizer.dp_config.to_dict()
  assert config["noise_strategy"]["fingerprint"] == strategy.fingerprint()
  rebuilt = DPConfig(**config)
  assert rebuilt.noise_strategy == strategy and rebuilt.max_passes == 2


@pytest.mark.parametrize("K", KERAS)
def test_budget_stops_a_correlated_noise_fit_at_the_target(K):
  # 3 steps per pass, banded c_0..c_2 (||c|| = 1), replace-one, sigma 3.
  # After t steps an example took part ceil(t / 3) times, 3 steps apart;
  # column j of the rows released by t steps holds c_0..c_{m-1}, m =
  # min(3, t - j). Closed form: t = 5 releases sens^2 = 1 + c_0^2 + c_1^2
  # (columns 0 and 3), t = 6 releases sens^2 = 2 (columns 0 and 3, whole).
  strategy = mf.banded_strategy(12, 3)
  c = np.asarray(strategy.coefficients)
  sigma, delta = 3.0, 1e-5
  eps_5 = mf.epsilon_of_mu(2 * math.sqrt(1 + c[0]**2 + c[1]**2) / sigma,
                           delta)
  eps_6 = mf.epsilon_of_mu(2 * math.sqrt(2.0) / sigma, delta)
  assert eps_5 < eps_6
  target = 0.5 * (eps_5 + eps_6)
  x, y = helpers.make_data("dense", N)
  model = _model(K, sigma, noise_strategy=strategy, max_passes=4)
  budget = tf_dp.keras.PrivacyBudget(delta=delta, target_epsilon=target)
  seen = _fit(K, model, x, y, 4, callbacks=[budget])
  record = model.optimizer.ledger.to_dict()["correlated_noise"]
  assert record["steps_run"] == 5 and record["passes"] == 2
  eps = model.optimizer.ledger.correlated_noise.epsilon(delta)
  assert eps == pytest.approx(eps_5, rel=1e-6) and eps <= target
  assert budget.epsilon() == eps and not budget.exceeded
  # Training stopped after step 5 (4 epochs would have run 12).
  assert len(seen) == 5
  for w, last in zip(model.get_weights(), seen[4]):
    np.testing.assert_array_equal(w, last)
  # A target below one step's epsilon: nothing is released.
  eps_1 = mf.epsilon_of_mu(2 * c[0] / sigma, delta)
  model = _model(K, sigma, noise_strategy=strategy, max_passes=4)
  before = [w.copy() for w in model.get_weights()]
  budget = tf_dp.keras.PrivacyBudget(delta=delta, target_epsilon=0.9 * eps_1)
  _fit(K, model, x, y, 1, callbacks=[budget])
  assert model.optimizer.ledger.to_dict()["correlated_noise"][
      "steps_run"] == 0
  assert budget.epsilon() == 0.0
  for w, b in zip(model.get_weights(), before):
    np.testing.assert_array_equal(w, b)



@pytest.mark.parametrize("K", KERAS)
def test_a_later_fit_cutting_the_arrays_into_other_lots_is_refused(K):
  # 24 examples in batches of 8 or of 11 are both 3 steps per pass, but
  # example 8 is at step 1 of the first pass and step 0 (run step 3) of the
  # second: 2 steps apart, while the record would say 3 (a pass).
  x, y = helpers.make_data("dense", N)
  model = _model(K, noise_strategy=mf.banded_strategy(6, 3), max_passes=2)
  _fit(K, model, x, y, 1)
  before = [w.copy() for w in model.get_weights()]
  with pytest.raises(PrivacyError, match="another batch size"):
    model.fit(x, y, batch_size=11, epochs=1, shuffle=False, verbose=0)
  for w, b in zip(model.get_weights(), before):
    np.testing.assert_array_equal(w, b)
  assert model.optimizer.ledger.correlated_noise.to_dict()["steps_run"] == 3


@pytest.mark.parametrize("K", KERAS)
def test_steps_outside_fit_after_a_fit_are_refused(K):
  # After a pass of fit, a step on the first batch again would be example
  # 0's second participation 3 steps after its first, and a third one 1
  # step later: the record (passes a pass apart) would not hold.
  x, y = helpers.make_data("dense", N)
  model = _model(K, noise_strategy=mf.banded_strategy(6, 1), max_passes=2)
  _fit(K, model, x, y, 1)
  ledger = model.optimizer.ledger
  before = [w.copy() for w in model.get_weights()]
  loss = K.losses.SparseCategoricalCrossentropy(from_logits=True)
  with pytest.raises(PrivacyError, match="train_on_batch step"):
    model.train_on_batch(x[:BATCH], y[:BATCH])
  with pytest.raises(PrivacyError, match="private_step step"):
    model.optimizer.private_step(model, loss, x[:BATCH], y[:BATCH])
  for w, b in zip(model.get_weights(), before):
    np.testing.assert_array_equal(w, b)
  assert ledger.correlated_noise.to_dict()["steps_run"] == 3
  # A step traced in a tf.function is not checked before it runs: the
  # record counts it as outside the passes and is refused.
  step = tf.function(lambda a, b: model.optimizer.private_step(
      model, loss, a, b))
  step(x[:BATCH], y[:BATCH])
  record = ledger.correlated_noise.to_dict()
  assert record["steps_run"] == 4 and record["inconsistent_steps"] == 1
  with pytest.raises(PrivacyError, match="outside the fixed-order passes"):
    tf_dp.analysis.compute_epsilon_from_ledger(ledger, 1e-5)
