# %% [markdown]
# # DP-SGD in an Estimator pipeline (TensorFlow 2.15)
# `tf.estimator` exists up to TF 2.15. The DP optimizers are `tf.compat.v1` optimizers
# taking the **per-example** loss vector; the ledger is saved in the checkpoint.
# **Privacy claim:** example-level (ε, δ)-DP for the model in `model_dir`.

# %%
import os
import tempfile
import tensorflow as tf
import tf_dp
from tf_dp import estimator as dp_estimator

QUICK = os.environ.get("TF_DP_QUICK") == "1"
if not hasattr(tf, "estimator"):
  print("tf.estimator needs TensorFlow 2.15; skipping.")
else:
  (x, y), (xt, yt) = tf_dp.data.load_digits()
  n = len(x)

  def model_fn(features, labels, mode):
    logits = tf.compat.v1.layers.dense(features, 10)
    per_example = tf.keras.losses.sparse_categorical_crossentropy(
        labels, logits, from_logits=True)
    if mode == tf.estimator.ModeKeys.EVAL:
      return tf.estimator.EstimatorSpec(mode, loss=tf.reduce_mean(per_example),
          eval_metric_ops={"accuracy": tf.compat.v1.metrics.accuracy(
              labels, tf.argmax(logits, 1))})
    opt = dp_estimator.DPGradientDescentOptimizer(
        l2_norm_clip=1.0, noise_multiplier=1.0, population_size=n,
        learning_rate=1.0)
    train_op = opt.minimize(per_example,
                            global_step=tf.compat.v1.train.get_global_step())
    return tf.estimator.EstimatorSpec(mode, loss=tf.reduce_mean(per_example),
                                      train_op=train_op)

  model_dir = tempfile.mkdtemp()
  est = tf.estimator.Estimator(model_fn, model_dir=model_dir)
  est.train(lambda: tf.data.Dataset.from_tensor_slices((x, y)).shuffle(n).repeat()
            .batch(64, drop_remainder=True), steps=30 if QUICK else 300)
  metrics = est.evaluate(lambda: tf.data.Dataset.from_tensor_slices((xt, yt)).batch(100))
  ledger = dp_estimator.ledger_from_checkpoint(model_dir)
  eps, _ = tf_dp.analysis.compute_epsilon_from_ledger(ledger, 1e-5)
  print(f"accuracy {metrics['accuracy']:.3f}, {len(ledger['samples'])} steps, epsilon {eps:.2f}")
