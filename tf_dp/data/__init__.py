"""Data helpers: Poisson sampling as the accountant assumes it, and loaders."""

from tf_dp.data.datasets import load_digits
from tf_dp.data.datasets import load_mnist
from tf_dp.data.poisson import poisson_sampled_batches
