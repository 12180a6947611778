"""Membership-inference reports on real Keras models (UCI DIGITS, sklearn):
an overfitted model leaks, a tf_dp model at a small ε does not, and its
empirical ε stays below the ledger's; a one-run canary audit of a real
tf_dp fit stays below its ledger's ε, and finds more than it when the
mechanism skips its noise or its clipping."""

import numpy as np
import pytest
import tensorflow as tf

import tf_dp
from tf_dp.analysis import lira
from tf_dp.analysis import membership_inference as mi
from tf_dp.dp_query import GaussianSumQuery
from tf_dp.keras import membership_inference as kmi
from tf_dp.reproductions.audit import ClipOffQuery
from tf_dp.reproductions.audit import NoiseOffQuery
from tests.keras import helpers

KERAS = helpers.keras_modules()
DELTA = 1e-5


def digits(num_members, seed=0):
  """DIGITS split into members (the first ``num_members`` of a random
  order) and non-members (the rest)."""
  datasets = pytest.importorskip("sklearn.datasets")
  x, y = datasets.load_digits(return_X_y=True)
  x, y = (x / 16).astype("float32"), y.astype("int32")
  order = np.random.default_rng(seed).permutation(len(x))
  members, nonmembers = order[:num_members], order[num_members:]
  return (x[members], y[members]), (x[nonmembers], y[nonmembers])


def mlp(K, activation=None):
  K.utils.set_random_seed(0)
  return K.Sequential([K.layers.Input((64,)),
                       K.layers.Dense(128, activation="relu"),
                       K.layers.Dense(10, activation=activation)])


@pytest.mark.parametrize("K", KERAS)
def test_threshold_attack_finds_an_overfitted_model(K):
  members, nonmembers = digits(100)
  model = mlp(K)
  model.compile(K.optimizers.Adam(0.01),
                K.losses.SparseCategoricalCrossentropy(from_logits=True))
  # 200 epochs of 100 examples, as one pass over 200 copies (one fit call).
  model.fit(np.tile(members[0], (200, 1)), np.tile(members[1], 200),
            batch_size=50, epochs=1, verbose=0)
  report = kmi.loss_threshold_attack(model, members, nonmembers, delta=DELTA)
  # Measured AUC 0.72 and ε >= 1.2 (Keras 3). Under no leak the AUC of 100
  # against 1697 examples has standard error 0.03: 0.62 is 4 of them.
  assert report.auc > 0.62
  assert report.epsilon_lower_bound > 0.3
  assert (report.num_members, report.num_nonmembers) == (100, 1697)


@pytest.mark.parametrize("K", KERAS)
def test_a_private_model_leaks_less_than_its_ledger_says(K):
  members, nonmembers = digits(898)
  epochs, batch_size = 4, 100
  noise_multiplier = tf_dp.analysis.compute_noise_multiplier(
      898, batch_size, 2.0, epochs, DELTA, sampling="fixed_size")
  model = tf_dp.keras.make_private(mlp(K))
  model.compile(
      tf_dp.DPOptimizer(K.optimizers.SGD(0.5), l2_norm_clip=1.0,
                        noise_multiplier=noise_multiplier),
      K.losses.SparseCategoricalCrossentropy(from_logits=True),
      metrics=["accuracy"])
  model.fit(*members, epochs=epochs, batch_size=batch_size, verbose=0)
  with pytest.warns(UserWarning, match="shuffled"):
    epsilon, _ = tf_dp.analysis.compute_epsilon_from_ledger(
        model.optimizer.ledger, DELTA)
  assert epsilon == pytest.approx(2.0, abs=0.01)
  # The model learned (measured 0.74 accuracy on the non-members, chance
  # is 0.1), so a small AUC is not that of a model that learned nothing.
  assert model.evaluate(*nonmembers, verbose=0)[1] > 0.5
  report = kmi.loss_threshold_attack(model, members, nonmembers, delta=DELTA)
  # Measured AUC 0.49. Without a leak the AUC of 898 against 899 examples
  # has standard error 0.0136, and the DP noise (OS entropy) is fresh in
  # every run: 0.075 is 5.5 of them (4e-8; 0.05, 3.7 of them, failed
  # about 2e-4 of the runs). ε-DP with ε = 2 would allow up to about 0.85
  # (TPR <= e^ε FPR + δ at every threshold).
  assert report.auc == pytest.approx(0.5, abs=0.075)
  assert report.epsilon_lower_bound < epsilon
  assert report.advantage < (np.exp(epsilon) - 1 + 2 * DELTA) / (
      np.exp(epsilon) + 1)


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("activation", [None, "softmax"])
def test_membership_scores_equal_keras_losses(K, activation):
  members, _ = digits(40)
  model = mlp(K, activation)
  losses, phi = kmi.membership_scores(model, *members)
  loss = K.losses.SparseCategoricalCrossentropy(
      from_logits=activation is None, reduction="none")
  expected = np.asarray(loss(members[1], model(members[0])))
  np.testing.assert_allclose(losses, expected, rtol=1e-4, atol=1e-6)
  # φ = log(p_y / (1 − p_y)), from the softmax probabilities.
  p = tf.nn.softmax(model(members[0])).numpy() if activation is None else (
      np.asarray(model(members[0])))
  p_y = p[np.arange(40), members[1]].astype(np.float64)
  np.testing.assert_allclose(phi, np.log(p_y / (1 - p_y)), rtol=1e-3,
                             atol=1e-4)


def centroid_model(K, x, y):
  """A classifier with logits x·μ_c − ||μ_c||²/2 (μ_c: the class means of
  ``x``), as a Keras model: a shadow "trained" in closed form."""
  means = np.stack([x[y == c].mean(axis=0) for c in range(10)])
  model = K.Sequential([K.layers.Input((64,)), K.layers.Dense(10)])
  model.layers[-1].set_weights([means.T, -0.5 * np.sum(means ** 2, axis=1)])
  return model


@pytest.mark.parametrize("K", KERAS)
def test_shadow_models_and_lira_report(K):
  (x, y), _ = digits(200)
  calls = []

  def train_model(x_half, y_half):
    calls.append(len(x_half))
    return centroid_model(K, x_half, y_half)

  scores, membership = kmi.train_shadow_models(train_model, x, y,
                                               num_shadow_models=4, seed=1)
  np.testing.assert_array_equal(membership, lira.random_halves(200, 4, 1))
  assert calls == list(membership.sum(axis=1))
  for i in range(4):
    means = np.stack([x[membership[i]][y[membership[i]] == c].mean(axis=0)
                      for c in range(10)])
    logits = x @ means.T - 0.5 * np.sum(means ** 2, axis=1)
    np.testing.assert_allclose(
        scores[i], lira.logit_confidence(logits, y, True), rtol=1e-4,
        atol=1e-3)
  is_member = np.arange(200) < 100
  target = centroid_model(K, x[is_member], y[is_member])
  report = kmi.lira_attack(target, x, y, is_member, scores, membership,
                           delta=DELTA, fix_variance=True)
  _, phi = kmi.membership_scores(target, x, y)
  expected = mi.membership_inference_report(
      *lira.split_scores(lira.lira_scores(phi, scores, membership,
                                          fix_variance=True), is_member),
      delta=DELTA)
  assert report.attack == "LiRA (online)"
  assert report.auc == pytest.approx(expected.auc)
  assert report.tpr_at_fpr == pytest.approx(expected.tpr_at_fpr)


@pytest.mark.parametrize("K", KERAS)
def test_bad_input_is_refused(K):
  members, _ = digits(20)
  binary = K.Sequential([K.layers.Input((64,)),
                         K.layers.Dense(1, activation="tanh")])
  with pytest.raises(ValueError, match="pass from_logits=True or False"):
    kmi.membership_scores(binary, members[0], members[1] % 2)
  with pytest.raises(ValueError, match=r"labels must lie in \[0, 10\)"):
    kmi.membership_scores(mlp(K), members[0], members[1] + 10)
  with pytest.raises(ValueError, match="nonmembers must be a pair"):
    kmi.loss_threshold_attack(mlp(K), members, members[0], delta=DELTA)
  with pytest.raises(ValueError, match="fpr=0.001 needs at least 1000"):
    kmi.loss_threshold_attack(mlp(K), members, members, delta=DELTA,
                              fprs=[0.001])
  with pytest.raises(ValueError, match="x and y must hold the same number"):
    kmi.train_shadow_models(lambda a, b: None, members[0], members[1][:5],
                            num_shadow_models=2)


# The one-run audits below: 1300 DIGITS examples, Poisson lots of q = 0.1,
# 40 lots, clip 1 and noise multiplier 1.6 (ledger ε 2.06 at δ = 1e-5).
AUDIT_STEPS, AUDIT_Q, AUDIT_NOISE = 40, 0.1, 1.6


def canary_fit(K, canaries, query):
  """A real tf_dp fit on DIGITS with ``canaries`` mixed in; returns the
  model to score, its optimizer and the mixed data."""
  members, _ = digits(1300)
  mixed = tf_dp.data.mix_canaries(*members, canaries)
  model = mlp(K)
  if canaries.kind == "dirac":
    model = tf_dp.keras.with_dirac_canaries(model, canaries)
  model = tf_dp.keras.make_private(model)
  optimizer = tf_dp.DPOptimizer(
      K.optimizers.SGD(0.5), dp_query=query,
      population_size=mixed.population_size, sampling="poisson",
      sampling_probability=AUDIT_Q, max_lots=AUDIT_STEPS + 5)
  model.compile(optimizer, K.losses.SparseCategoricalCrossentropy(
      from_logits=True))
  lots = tf_dp.data.poisson_sampled_batches(mixed.x, mixed.y, AUDIT_Q,
                                            AUDIT_STEPS, seed=7)
  with pytest.warns(UserWarning, match="seed=7"):
    model.fit(lots, epochs=1, verbose=0)
  return model, optimizer, mixed


@pytest.mark.parametrize("K", KERAS)
def test_one_run_audit_of_a_real_fit_stays_below_its_ledger(K):
  canaries = tf_dp.data.dirac_canaries(500, seed=11)
  model, optimizer, mixed = canary_fit(
      K, canaries, GaussianSumQuery(1.0, AUDIT_NOISE, noise_seed=3))
  # The canaries count in the population the ledger accounts.
  events = tf_dp.analysis.ledger_events(optimizer.ledger)
  assert {e.population_size for e in events} == {mixed.population_size}
  assert mixed.population_size == 1300 + canaries.num_included
  report = kmi.audit_canaries(model, canaries, delta=DELTA,
                              ledger=optimizer.ledger)
  epsilon, _ = tf_dp.analysis.compute_epsilon_from_ledger(optimizer.ledger,
                                                          DELTA)
  assert report.ledger_epsilon == epsilon == pytest.approx(2.06, abs=0.01)
  assert report.attack == "one-run audit (white-box, Dirac)"
  # Measured ε >= 0.07 (Keras 3, 150 of 250 guesses right): each canary
  # is in 4 lots on average, against the noise of 40 lots. The bound must
  # stay below the ledger's ε; a subsampled Gaussian keeps it far below.
  assert report.one_run.epsilon_lower_bound < epsilon
  assert not report.contradicts_ledger
  assert report.one_run.num_canaries == 500


@pytest.mark.parametrize("K", KERAS[:1])
@pytest.mark.parametrize("broken", [NoiseOffQuery, ClipOffQuery])
def test_one_run_audit_catches_a_broken_mechanism(K, broken):
  canaries = tf_dp.data.dirac_canaries(500, seed=11)
  model, optimizer, _ = canary_fit(K, canaries,
                                   broken(1.0, AUDIT_NOISE, noise_seed=3))
  report = kmi.audit_canaries(model, canaries, delta=DELTA,
                              ledger=optimizer.ledger)
  # The ledger still states ε 2.06 (the query claims its noise and clip)...
  assert report.ledger_epsilon == pytest.approx(2.06, abs=0.01)
  # ...and the audit refutes it: without noise every included canary that
  # was drawn moved its coordinate and no other did; without clipping
  # each moved it by 1000 C against noise of 1.6 C. Measured ε >= 3.35
  # (noise off: 493 of 500 guesses right; an included canary that no lot
  # drew, 1.5% of them, scores as an excluded one) and 3.49 (clipping
  # off: 249 of 250).
  assert report.contradicts_ledger
  assert report.one_run.epsilon_lower_bound > 3.0


@pytest.mark.slow
@pytest.mark.parametrize("K", KERAS[:1])
def test_black_box_audit_of_a_real_fit_stays_below_its_ledger(K):
  _, nonmembers = digits(1300)
  canaries = tf_dp.data.mislabeled_canaries(*nonmembers, 400, seed=12)
  model, optimizer, _ = canary_fit(
      K, canaries, GaussianSumQuery(1.0, AUDIT_NOISE, noise_seed=3))
  report = kmi.audit_canaries(model, canaries, delta=DELTA,
                              ledger=optimizer.ledger)
  assert report.attack == "one-run audit (black-box, mislabeled loss)"
  # The scores are minus the canaries' losses.
  losses, _ = kmi.membership_scores(model, canaries.x, canaries.y)
  np.testing.assert_allclose(kmi.canary_scores(model, canaries), -losses)
  # Measured AUC 0.55 and ε >= 0 (16 of 20 guesses right): 40 noisy lots
  # do not memorize a wrong label.
  assert report.one_run.epsilon_lower_bound < report.ledger_epsilon
