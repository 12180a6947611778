"""Data helpers: Poisson and fixed-size sampling as the accountant assumes
them, of examples or of users, and loaders."""

from tf_dp.data.datasets import load_digits
from tf_dp.data.datasets import load_mnist
from tf_dp.data.datasets import load_shakespeare
from tf_dp.data.datasets import shakespeare_lines
from tf_dp.data.fixed_size import fixed_size_sampled_batches
from tf_dp.data.lots import declare_sampling
from tf_dp.data.lots import DeclaredSampling
from tf_dp.data.poisson import poisson_sampled_batches
from tf_dp.data.users import fixed_size_sampled_users
from tf_dp.data.users import poisson_sampled_users
