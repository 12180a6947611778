# %% [markdown]
# # DP-SGD in your own training loop
# Many TensorFlow 2 programs train with their own `tf.GradientTape` loop, not
# `model.fit`. `DPOptimizer.private_step` is the DP step `fit` takes: each
# example's gradient is clipped, the lot is noised once, and the ledger records
# one sample per lot. **Privacy claim:** adding or removing any one training
# image changes the probability of any training outcome by at most a factor
# e^ε, except with probability δ (example-level (ε, δ)-DP, Poisson lots).

# %%
import os
import numpy as np
import tensorflow as tf
import tf_dp

QUICK = os.environ.get("TF_DP_QUICK") == "1"  # small settings for CI
(x, y), (xt, yt) = tf_dp.data.load_mnist()
n = 6000 if QUICK else 60000
x = (x[:n] / 255.0).astype("float32").reshape(n, -1)
y = y[:n].astype("int32")
xt = (xt / 255.0).astype("float32").reshape(len(xt), -1)

# %% [markdown]
# The loop draws Poisson lots (each example independently with probability q),
# the sampling the accountant's guarantee assumes. The loss is given by hand:
# `private_step` evaluates it on each example alone, so even a loss function
# that reads its whole batch cannot mix examples.

# %%
batch_size, epochs = 256, (1 if QUICK else 3)
q = batch_size / n
steps = int(epochs / q)
model = tf_dp.keras.make_private(tf.keras.Sequential([
    tf.keras.layers.Input((784,)),
    tf.keras.layers.Dense(256, activation="relu"),
    tf.keras.layers.Dense(10)]))
optimizer = tf_dp.DPOptimizer(
    tf.keras.optimizers.SGD(0.5), l2_norm_clip=1.0, noise_multiplier=1.1,
    population_size=n, sampling="poisson", sampling_probability=q)
loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
lots = tf_dp.data.poisson_sampled_batches(x, y, q, steps)


@tf.function
def train_step(features, labels, weights):
  return tf.reduce_mean(optimizer.private_step(model, loss, features, labels,
                                               sample_weight=weights))


for step, (features, labels, weights) in enumerate(lots):
  value = train_step(features, labels, weights)
  if step % 50 == 0:
    print(f"step {step}: loss {float(value):.3f}")

# %%
logits = model.predict(xt, verbose=0)
accuracy = float(np.mean(np.argmax(logits, 1) == yt))
eps, _ = tf_dp.analysis.compute_epsilon_from_ledger(optimizer.ledger, 1e-5)
print(f"test accuracy {accuracy:.3f} at epsilon {eps:.2f} (delta 1e-5)")
assert accuracy > 0.5 and np.isfinite(eps)
