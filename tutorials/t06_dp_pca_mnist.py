# %% [markdown]
# # DP-PCA on MNIST, then DP-SGD (Abadi et al. 2016)
# A 60-dimensional projection computed with differential privacy; its cost is one
# more entry in the same ledger as the training steps.
# **Privacy claim:** the ledger's (ε, δ) covers the projection and the model.

# %%
import os
import sys
sys.path.insert(0, os.path.dirname(os.path.abspath("__file__")))
sys.path.insert(0, "tutorials")
import mnist_dp_pca

QUICK = os.environ.get("TF_DP_QUICK") == "1"
accuracy, eps, ledger = mnist_dp_pca.run(epochs=0.5 if QUICK else 5, verbose=0)
print(f"test accuracy {accuracy:.3f}, epsilon {eps:.2f} "
      f"({len(ledger.to_dict()['samples'])} ledger samples, the first is DP-PCA)")
