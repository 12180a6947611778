"""Membership-inference reports on real Keras models (UCI DIGITS, sklearn):
an overfitted model leaks, a tf_dp model at a small ε does not, and its
empirical ε stays below the ledger's."""

import numpy as np
import pytest
import tensorflow as tf

import tf_dp
from tf_dp.analysis import lira
from tf_dp.analysis import membership_inference as mi
from tf_dp.keras import membership_inference as kmi
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
