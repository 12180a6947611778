# %% [markdown]
# # Per-group clipping and noise allocation (McMahan & Andrew 2018)
# Flat, per-layer and dimension-adjusted clipping; proportional and
# dimensionality-adjusted noise. Every strategy keeps the total L2 bound S* and the
# effective noise multiplier z of eq. (1), so all have the **same privacy cost**.

# %%
import os
import numpy as np
import tensorflow as tf
import tf_dp
from tf_dp.dp_query import allocation

dims = [784 * 256, 256, 256 * 10, 10]
for clipping in ("per_layer", "dimensionality_adjusted"):
  for noise in ("proportional", "dimensionality_adjusted"):
    clips = allocation.group_clips(1.0, dims, clipping)
    stddevs = allocation.group_stddevs(1.1, clips, dims, noise)
    z = tf_dp.effective_noise_multiplier(clips, stddevs)
    print(f"{clipping:18s} {noise:23s} clips={np.round(clips, 3)} z={z:.3f}")

# %% [markdown]
# Train with per-layer clipping: `DPOptimizer(..., clipping="per_layer")`.

# %%
QUICK = os.environ.get("TF_DP_QUICK") == "1"
(x, y), (xt, yt) = tf_dp.data.load_digits()
model = tf_dp.keras.make_private(tf.keras.Sequential([
    tf.keras.layers.Input((64,)), tf.keras.layers.Dense(64, activation="relu"),
    tf.keras.layers.Dense(10)]))
model.compile(optimizer=tf_dp.DPOptimizer(
    tf.keras.optimizers.SGD(0.5), l2_norm_clip=1.0, noise_multiplier=1.1,
    population_size=len(x), clipping="per_layer"),
    loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=["accuracy"])
model.fit(x, y, batch_size=64, epochs=3 if QUICK else 20, verbose=0)
eps, _ = tf_dp.analysis.compute_epsilon_from_ledger(model.optimizer.ledger, 1e-5)
print(f"test accuracy {model.evaluate(xt, yt, verbose=0)[1]:.3f}, epsilon {eps:.2f}")
