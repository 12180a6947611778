# %% [markdown]
# # Differentially private dropout (Ermis & Cemgil 2017) on DIGITS
# DPD clips each example's gradient to C, sums them and adds N(0, 4C²σ²): Gaussian
# dropout noise with per-weight rate α = 4C²σ²/θ². The paper's σ values come from
# composing its accounting over data passes; tf_dp calibrates σ with its own
# accountant (PLD) for the iterations actually performed, and reports the ε of the
# run from its ledger. DP dropout is a paper reproduction: `tf_dp.reproductions`.
# **Privacy claim:** the ledger's ε (Poisson sampling, add/remove neighbours,
# δ = 1e-4).

# %%
import os
import warnings
import numpy as np
import tensorflow as tf
import tf_dp
from tf_dp.reproductions.dpd import make_dpd_optimizer

QUICK = os.environ.get("TF_DP_QUICK") == "1"
(x, y), (xt, yt) = tf_dp.data.load_digits()
n, batch, epochs = len(x), 100, (5 if QUICK else 100)
opt, info = make_dpd_optimizer(n, batch, epochs, l2_norm_clip=2.0,
                               learning_rate=0.05, epsilon=1.0, delta=1e-4)
with warnings.catch_warnings():
  warnings.simplefilter("ignore")
  published = tf_dp.reproductions.dpd_noise_multiplier(
      1.0, 1e-4, info["sampling_probability"], info["iterations"], "zcdp",
      as_published=True)
print(f"sigma for epsilon=1 over {info['iterations']} iterations: tf_dp "
      f"{info['sigma']:.2f}; the paper's zCDP as published {published:.2f}")

# %% [markdown]
# Train on Poisson samples (the sampling the accountant assumes), all in one Keras epoch.

# %%
model = tf_dp.keras.make_private(tf.keras.Sequential([
    tf.keras.layers.Input((64,)), tf.keras.layers.Dense(500, activation="relu"),
    tf.keras.layers.Dense(10)]))
model.compile(optimizer=opt, loss=tf.keras.losses.SparseCategoricalCrossentropy(
    from_logits=True), metrics=["accuracy"])
data = tf_dp.data.poisson_sampled_batches(x, y.astype("int32"),
                                          info["sampling_probability"],
                                          info["iterations"])
model.fit(data, epochs=1, verbose=0)
eps, _ = tf_dp.analysis.compute_epsilon_from_ledger(opt.ledger, 1e-4)
alpha = tf_dp.reproductions.dpd_dropout_rates(
    info["sigma"], 2.0, model.trainable_variables[0].numpy())
print(f"test accuracy {model.evaluate(xt, yt, verbose=0)[1]:.3f}; the ledger's "
      f"epsilon for this run is {eps:.2f}; median dropout rate alpha "
      f"{np.median(alpha):.3g}")
