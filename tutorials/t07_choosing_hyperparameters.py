# %% [markdown]
# # Choosing hyperparameters for a target ε
# For a target (ε, δ), the accountant finds the noise multiplier, the number of
# epochs or the batch size (bisection; McMahan & Andrew Sec. 4). Heuristics (Abadi et
# al. Sec. 3.3): lots of about √N examples, as many batches per epoch as epochs,
# a clip near the median gradient norm, a fairly large learning rate.

# %%
from tf_dp import analysis

n, delta = 60000, 1e-5
for eps in (1.0, 3.0, 8.0):
  z = analysis.compute_noise_multiplier(n, 256, eps, 30, delta)
  print(f"epsilon {eps}: noise_multiplier {z:.3f} for batch 256, 30 epochs (Poisson)")
epochs, steps = analysis.compute_epochs(n, 256, 1.1, 3.0, delta)
print(f"noise 1.1, batch 256: {epochs:.1f} epochs ({steps} steps) fit in epsilon 3")
batch = analysis.compute_batch_size(n, 1.0, 2.0, 10, delta)
print(f"noise 1.0, 10 epochs, epsilon 2: batch size up to {batch}")
z_fixed = analysis.compute_noise_multiplier(n, 256, 3.0, 30, delta,
                                            sampling="fixed_size")
print(f"shuffled fixed-size batches need noise {z_fixed:.3f} for epsilon 3 "
      "(replace-one accounting); Poisson batches need less")
