"""compat.v1 DP optimizers in an Estimator model_fn (TF 2.15) and a Session."""

import numpy as np
import pytest
import tensorflow as tf

import tf_dp
# Imported by name (not only through tf_dp's lazy attributes) so that the
# test's BUILD dependencies carry them.
import tf_dp.analysis
import tf_dp.data
import tf_dp.dp_query
import tf_dp.privacy_ledger
from tf_dp import estimator as dp_estimator

v1 = tf.compat.v1


def _reference(w0, x, y, clip, lr):
  """One DP-SGD step of least squares by a per-example loop (no noise)."""
  total = np.zeros_like(w0)
  for xi, yi in zip(x, y):
    g = 2 * (xi @ w0 - yi) * xi  # d/dw (x.w - y)^2
    norm = np.linalg.norm(g)
    total += g * min(1.0, clip / norm)
  return w0 - lr * total / len(x)


def test_session_step_equals_per_example_loop():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(6, 3)).astype(np.float32)
  y = rng.normal(size=6).astype(np.float32)
  w0 = rng.normal(size=3).astype(np.float32)
  with tf.Graph().as_default():
    w = tf.Variable(w0)
    loss = tf.square(tf.linalg.matvec(tf.constant(x), w) - y)
    with pytest.warns(UserWarning):
      opt = dp_estimator.DPGradientDescentOptimizer(
          0.5, 0.0, 6, learning_rate=0.1)
    train = opt.minimize(loss, var_list=[w])
    with v1.Session() as sess:
      sess.run(v1.global_variables_initializer())
      sess.run(train)
      np.testing.assert_allclose(sess.run(w), _reference(w0, x, y, 0.5, 0.1),
                                 rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("sampling", ["fixed_size", "shuffled"])
def test_session_step_records_what_was_drawn(sampling):
  """One ledger sample per step: q = batch / n for fixed-size and shuffled
  batches, and the microbatch size as examples per record."""
  with tf.Graph().as_default():
    w = tf.Variable([1.0, 2.0, 3.0])
    x = tf.constant(np.arange(18, dtype=np.float32).reshape(6, 3))
    loss = tf.square(tf.linalg.matvec(x, w))
    opt = dp_estimator.DPGradientDescentOptimizer(
        1.0, 1.0, 600, learning_rate=0.1, num_microbatches=2,
        sampling=sampling)
    train = opt.minimize(loss, var_list=[w])
    ledger = opt._state_for_graph([w])[1]  # pylint: disable=protected-access
    with v1.Session() as sess:
      sess.run(v1.global_variables_initializer())
      sess.run(train)
      sess.run(train)
      count, rows = sess.run([ledger.sample_count,
                              ledger._samples])  # pylint: disable=protected-access
  assert count == 2
  for n, q, _, examples_per_record in rows[:2]:
    assert (n, q, examples_per_record) == (600, pytest.approx(6 / 600), 3)


def test_query_with_its_own_ledger_is_refused():
  query = tf_dp.privacy_ledger.QueryWithLedger(
      tf_dp.GaussianSumQuery(1.0, 1.0), tf_dp.PrivacyLedger(10, 0.1))
  with pytest.raises(ValueError, match="pass the query itself"):
    dp_estimator.DPGradientDescentOptimizer(None, None, 10, 0.1,
                                            dp_query=query)


def test_batch_by_time_loss_is_each_example_mean_over_time():
  """A [batch, time] loss (a language model's): each example's loss is its
  mean over time, clipped as one record; equals the per-example loop on
  the time-averaged loss."""
  rng = np.random.default_rng(1)
  x = rng.normal(size=(6, 4, 3)).astype(np.float32)
  y = rng.normal(size=(6, 4)).astype(np.float32)
  w0 = rng.normal(size=3).astype(np.float32)
  total = np.zeros_like(w0)
  for xi, yi in zip(x, y):
    g = np.mean([2 * (xt @ w0 - yt) * xt for xt, yt in zip(xi, yi)], axis=0)
    total += g * min(1.0, 0.5 / np.linalg.norm(g))
  with tf.Graph().as_default():
    w = tf.Variable(w0)
    loss = tf.square(tf.einsum("btk,k->bt", tf.constant(x), w) - y)
    with pytest.warns(UserWarning):
      opt = dp_estimator.DPGradientDescentOptimizer(
          0.5, 0.0, 6, learning_rate=0.1)
    train = opt.minimize(loss, var_list=[w])
    with v1.Session() as sess:
      sess.run(v1.global_variables_initializer())
      sess.run(train)
      np.testing.assert_allclose(sess.run(w), w0 - 0.1 * total / 6,
                                 rtol=1e-5, atol=1e-6)


def test_scalar_loss_is_refused():
  with tf.Graph().as_default():
    w = tf.Variable([1.0])
    opt = dp_estimator.DPGradientDescentOptimizer(1.0, 1.0, 10, 0.1)
    with pytest.raises(ValueError, match="a value per example"):
      opt.minimize(tf.reduce_mean(w * 2.0), var_list=[w])


def _session_steps(build_loss, steps=3, **opt_kwargs):
  """Runs ``steps`` DP steps of ``build_loss(features, ids, w, emb)`` on one
  batch from a tf.data iterator; returns (outcome, weights, ledger count)."""
  rng = np.random.default_rng(0)
  x = rng.normal(size=(8, 3)).astype(np.float32)
  ids = rng.integers(0, 5, size=(8,)).astype(np.int32)
  with tf.Graph().as_default():
    features, id_batch = v1.data.make_one_shot_iterator(
        tf.data.Dataset.from_tensors((x, ids)).repeat()).get_next()
    w = tf.Variable(np.ones(3, np.float32))
    emb = tf.Variable(rng.normal(size=(5, 3)).astype(np.float32))
    loss = build_loss(features, id_batch, w, emb)
    opt = dp_estimator.DPGradientDescentOptimizer(1.0, 1.0, 100,
                                                  learning_rate=0.1,
                                                  **opt_kwargs)
    train = opt.minimize(loss, var_list=[w, emb])
    ledger = opt._state_for_graph([w, emb])[1]  # pylint: disable=protected-access
    with v1.Session() as sess:
      sess.run(v1.global_variables_initializer())
      outcome = "trained"
      try:
        for _ in range(steps):
          sess.run(train)
      except tf.errors.InvalidArgumentError as e:
        outcome = str(e)
      return outcome, sess.run([w, emb]), int(sess.run(ledger.sample_count))


def _batch_centred(features, ids, w, emb):
  del ids, emb
  h = features - tf.reduce_mean(features, axis=0)
  return tf.square(tf.linalg.matvec(h, w) - 1.0)


def _batch_centred_embeddings(features, ids, w, emb):
  del features
  h = tf.gather(emb, ids)
  h = h - tf.reduce_mean(h, axis=0)
  return tf.square(tf.linalg.matvec(h, w) - 1.0)


def _independent_with_dropout(features, ids, w, emb):
  h = tf.nn.dropout(features + tf.gather(emb, ids), 0.5)
  return tf.square(tf.linalg.matvec(h, w) - 1.0)


@pytest.mark.parametrize("build_loss", [_batch_centred,
                                        _batch_centred_embeddings])
def test_a_loss_that_reads_other_examples_is_refused_before_any_change(
    build_loss):
  """One example moves every centred example's gradient: the step fails
  with the reason, no variable changes and the ledger records nothing."""
  outcome, (w, emb), samples = _session_steps(build_loss)
  assert "depends on other examples of the batch" in outcome
  np.testing.assert_array_equal(w, np.ones(3))
  assert samples == 0
  del emb


def test_independent_examples_train_with_the_check_and_dropout():
  outcome, (w, _), samples = _session_steps(_independent_with_dropout)
  assert outcome == "trained"
  assert samples == 3
  assert np.all(w != 1.0)


def test_self_check_false_trains_a_mixing_loss():
  outcome, _, samples = _session_steps(_batch_centred, self_check=False)
  assert (outcome, samples) == ("trained", 3)


@pytest.mark.skipif(not hasattr(tf, "estimator"),
                    reason="tf.estimator exists up to TF 2.15 only")
def test_estimator_with_batch_norm_in_training_mode_is_refused(tmp_path):
  (x, y), _ = tf_dp.data.load_digits()

  def model_fn(features, labels, mode):
    h = v1.layers.dense(features, 16)
    h = v1.layers.batch_normalization(h, training=True)
    logits = v1.layers.dense(h, 10)
    per_example = tf.keras.losses.sparse_categorical_crossentropy(
        labels, logits, from_logits=True)
    opt = dp_estimator.DPGradientDescentOptimizer(
        1.0, 1.0, len(x), learning_rate=0.1)
    train_op = opt.minimize(per_example,
                            global_step=v1.train.get_global_step())
    return tf.estimator.EstimatorSpec(mode, loss=tf.reduce_mean(per_example),
                                      train_op=train_op)

  est = tf.estimator.Estimator(model_fn, model_dir=str(tmp_path))
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match="BatchNormalization in training mode"):
    est.train(lambda: tf.data.Dataset.from_tensor_slices((x, y)).repeat()
              .batch(32), steps=2)


@pytest.mark.skipif(not hasattr(tf, "estimator"),
                    reason="tf.estimator exists up to TF 2.15 only")
@pytest.mark.parametrize("opt_cls", ["DPGradientDescentOptimizer",
                                     "DPAdamOptimizer", "DPAdagradOptimizer"])
def test_estimator_trains_and_writes_the_ledger(tmp_path, opt_cls):
  (x, y), (xt, yt) = tf_dp.data.load_digits()
  n, batch, steps = len(x), 64, 60

  def model_fn(features, labels, mode):
    logits = v1.layers.dense(features, 10)
    per_example = tf.keras.losses.sparse_categorical_crossentropy(
        labels, logits, from_logits=True)
    if mode == tf.estimator.ModeKeys.EVAL:
      acc = v1.metrics.accuracy(labels, tf.argmax(logits, 1))
      return tf.estimator.EstimatorSpec(
          mode, loss=tf.reduce_mean(per_example),
          eval_metric_ops={"accuracy": acc})
    lr = {"DPGradientDescentOptimizer": 1.0, "DPAdamOptimizer": 0.05,
          "DPAdagradOptimizer": 0.5}[opt_cls]
    opt = getattr(dp_estimator, opt_cls)(l2_norm_clip=1.0,
                                         noise_multiplier=1.0,
                                         population_size=n, learning_rate=lr)
    train_op = opt.minimize(per_example, global_step=v1.train.get_global_step())
    return tf.estimator.EstimatorSpec(mode, loss=tf.reduce_mean(per_example),
                                      train_op=train_op)

  est = tf.estimator.Estimator(model_fn, model_dir=str(tmp_path))
  input_fn = lambda: tf.data.Dataset.from_tensor_slices(
      (x, y)).shuffle(n, seed=0).repeat().batch(batch, drop_remainder=True)
  est.train(input_fn, steps=steps // 2)
  est.train(input_fn, steps=steps // 2)  # resumes: the ledger continues.
  metrics = est.evaluate(
      lambda: tf.data.Dataset.from_tensor_slices((xt, yt)).batch(100))
  assert metrics["accuracy"] > 0.5  # chance is 0.1
  ledger = dp_estimator.ledger_from_checkpoint(str(tmp_path))
  assert len(ledger["samples"]) == steps
  eps, _ = tf_dp.analysis.compute_epsilon_from_ledger(ledger, 1e-5)
  expected, _ = tf_dp.analysis.compute_dp_sgd_privacy(
      n, batch, 1.0, steps * batch / n, 1e-5, sampling="fixed_size")
  assert eps == pytest.approx(expected, rel=1e-4)


DISTRIBUTED_ESTIMATOR = r"""
import sys
import numpy as np
import tensorflow as tf
replicas = int(sys.argv[1])
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from tf_dp import estimator as dp_estimator
x = np.random.default_rng(0).random((64, 4)).astype("float32")
y = (x[:, 0] > 0.5).astype("int32")

def model_fn(features, labels, mode):
  logits = tf.compat.v1.layers.dense(features, 2)
  loss = tf.keras.losses.sparse_categorical_crossentropy(labels, logits,
                                                         from_logits=True)
  opt = dp_estimator.DPGradientDescentOptimizer(1.0, 1.1, 64,
                                                learning_rate=0.1)
  train_op = opt.minimize(loss,
                          global_step=tf.compat.v1.train.get_global_step())
  return tf.estimator.EstimatorSpec(mode, loss=tf.reduce_mean(loss),
                                    train_op=train_op)

devices = ["/cpu:0", "/cpu:1"][:replicas]
config = tf.estimator.RunConfig(
    train_distribute=tf.distribute.MirroredStrategy(devices))
est = tf.estimator.Estimator(model_fn, config=config, model_dir=sys.argv[2])
est.train(lambda: tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(
    16), steps=3)
print("samples", len(dp_estimator.ledger_from_checkpoint(sys.argv[2])[
    "samples"]))
"""


@pytest.mark.skipif(not hasattr(tf, "estimator"),
                    reason="tf.estimator exists up to TF 2.15 only")
@pytest.mark.parametrize("replicas", [1, 2])
def test_estimator_under_a_strategy_trains_on_one_replica_only(replicas,
                                                               tmp_path):
  # Two replicas would each noise and record their half batch as a lot of
  # its own (the ledger would understate epsilon): refused at once, with
  # the fix. One replica trains and records one sample per step.
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  out = subprocess.run(
      [sys.executable, "-c", DISTRIBUTED_ESTIMATOR, str(replicas),
       str(tmp_path / "model")], capture_output=True, text=True, timeout=300,
      check=False)
  if replicas == 1:
    assert out.returncode == 0, out.stderr[-3000:]
    assert "samples 3" in out.stdout
  else:
    assert out.returncode != 0
    assert "train on one replica; this MirroredStrategy has 2" in out.stderr
    assert "tf_dp.keras.make_private" in out.stderr


def _estimator_mean(x, kernel, bias, query, **dp_kwargs):
  """The Estimator optimizer's private mean gradient of the per-example
  loss ``x @ kernel + bias`` (a v1 Session)."""
  with tf.Graph().as_default():
    k = tf.Variable(kernel)
    b = tf.Variable(bias)
    loss = tf.reshape(tf.matmul(tf.constant(x), k) + b, [-1])
    opt = dp_estimator.DPGradientDescentOptimizer(
        None, None, 40, learning_rate=1.0, dp_query=query, **dp_kwargs)
    grads = [g for g, _ in opt.compute_gradients(loss, var_list=[k, b])]
    with v1.Session() as sess:
      sess.run(v1.global_variables_initializer())
      return sess.run(grads)


def _keras_mean(K, x, kernel, bias, query, per_example_method, **dp_kwargs):
  """The Keras engine's private mean gradient of the same loss (eager)."""
  from tf_dp.core import config as config_lib  # pylint: disable=g-import-not-at-top
  from tf_dp.keras import dp_engine  # pylint: disable=g-import-not-at-top
  model = K.Sequential([K.layers.Input((x.shape[1],)), K.layers.Dense(1)])
  model.layers[-1].set_weights([kernel, bias])
  engine = dp_engine.DPEngine(config_lib.DPConfig(
      None, None, dp_query=query, population_size=40,
      per_example_method=per_example_method, **dp_kwargs))
  engine.build(model.trainable_variables, model)
  applied = []
  engine.step(model, lambda y, y_pred, w: tf.reshape(y_pred, [-1]),
              tf.constant(x), tf.zeros([len(x)]), None,
              lambda mean: applied.append([m.numpy() for m in mean]))
  return applied[0]


@pytest.mark.parametrize("per_example_method", ["vectorized", "fast"])
@pytest.mark.parametrize("dp_kwargs", [
    dict(sampling="fixed_size"),
    dict(sampling="shuffled", num_microbatches=3),
    dict(sampling="poisson", sampling_probability=0.2)],
                         ids=["fixed_size", "microbatches", "poisson"])
def test_estimator_and_keras_release_the_same_mean_gradient(
    per_example_method, dp_kwargs):
  """Same per-record gradients, same seeded query: the Estimator optimizer
  and the Keras engine share the clipping, the noise and the denominator,
  so they release the same mean gradient."""
  from tests.keras import helpers  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(3)
  x = (3 * rng.normal(size=(6, 4))).astype(np.float32)
  kernel = rng.normal(size=(4, 1)).astype(np.float32)
  bias = np.array([0.5], np.float32)
  query = lambda: tf_dp.GaussianSumQuery(1.0, 0.7, noise_seed=21)
  expected = _estimator_mean(x, kernel, bias, query(), **dp_kwargs)
  # The per-record gradient of x_i @ kernel + bias is (x_i, 1): huge next
  # to the clip, so every record is clipped, and noise is added.
  assert np.linalg.norm(expected[0]) > 0
  for param in helpers.keras_modules():
    got = _keras_mean(param.values[0], x, kernel, bias, query(),
                      per_example_method, **dp_kwargs)
    # Each front end differentiates its own graph (tf.gradients in a v1
    # Session, a tape in Keras): float32 rounding of the records' means.
    # The fast path's norms of records of two examples are certified: raised
    # by their rounding bounds (gamma_2(K+C+4) / 2 + 2 gamma_2 U / norm,
    # about 1e-6 relative here), so its clip scales are that much smaller.
    rtol = 3e-6 if per_example_method == "fast" else 1e-6
    for g, e in zip(got, expected):
      np.testing.assert_allclose(g, e, rtol=rtol, atol=1e-7)


def test_two_dp_optimizers_in_one_graph_each_have_their_ledger(tmp_path):
  """Reading "the" ledger of a checkpoint with two would drop one
  mechanism's steps from the accounting: refused, naming both; each is
  read by name with its own steps (2 and 3)."""
  with tf.Graph().as_default():
    x = tf.constant(np.ones((4, 2), np.float32))
    a, b = tf.Variable([1.0, 2.0]), tf.Variable([3.0, 4.0])
    steps = []
    for var in (a, b):
      opt = dp_estimator.DPGradientDescentOptimizer(1.0, 1.0, 40,
                                                    learning_rate=0.1)
      steps.append(opt.minimize(tf.square(tf.linalg.matvec(x, var)),
                                var_list=[var]))
    saver = v1.train.Saver()
    with v1.Session() as sess:
      sess.run(v1.global_variables_initializer())
      for _ in range(2):
        sess.run(steps)
      sess.run(steps[1])
      path = saver.save(sess, str(tmp_path / "ckpt"))
  with pytest.raises(ValueError, match="2 privacy ledgers.*tf_dp_privacy_"
                     "ledger_1.*composition"):
    dp_estimator.ledger_from_checkpoint(path)
  counts = [len(dp_estimator.ledger_from_checkpoint(path, name=name)[
      "samples"]) for name in ("tf_dp_privacy_ledger",
                               "tf_dp_privacy_ledger_1")]
  assert counts == [2, 3]
