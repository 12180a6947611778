# %% [markdown]
# # DP-SGD with Keras in two extra lines
# Train an MNIST classifier with differentially private SGD. **Privacy claim:** adding
# or removing any one training image changes the probability of any training outcome
# by at most a factor e^ε, except with probability δ (example-level (ε, δ)-DP).

# %%
import os
import tensorflow as tf
import tf_dp

QUICK = os.environ.get("TF_DP_QUICK") == "1"  # small settings for CI
(x, y), (xt, yt) = tf_dp.data.load_mnist()
n = 6000 if QUICK else 60000
x = (x[:n] / 255.0).astype("float32").reshape(n, -1)
y = y[:n].astype("int32")
xt = (xt / 255.0).astype("float32").reshape(len(xt), -1)

# %% [markdown]
# Two changes against non-private training: `make_private(model)` and `DPOptimizer`.
# Shuffled fixed-size batches are accounted as sampling without replacement
# (replace-one neighbours), which costs more ε than the Poisson sampling of
# `tf_dp.data.poisson_sampled_batches` (see `tutorials/mnist_dpsgd_keras.py`).

# %%
model = tf_dp.keras.make_private(tf.keras.Sequential([
    tf.keras.layers.Input((784,)),
    tf.keras.layers.Dense(256, activation="relu"),
    tf.keras.layers.Dense(10)]))
model.compile(
    optimizer=tf_dp.DPOptimizer(tf.keras.optimizers.SGD(0.5), l2_norm_clip=1.0,
                                noise_multiplier=1.5, population_size=n),
    loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=["accuracy"])
budget = tf_dp.keras.PrivacyBudget(delta=1e-5, target_epsilon=8.0)
history = model.fit(x, y, batch_size=256, epochs=1 if QUICK else 5,
                    callbacks=[budget], verbose=2)

# %%
_, accuracy = model.evaluate(xt, yt, verbose=0)
eps, _ = tf_dp.analysis.compute_epsilon_from_ledger(model.optimizer.ledger, 1e-5)
print(f"test accuracy {accuracy:.3f} at epsilon {eps:.2f} (delta 1e-5)")
assert accuracy > 0.5 and eps <= 8.0
