"""Data helpers: Poisson and fixed-size sampling as the accountant assumes
them, of examples or of users, loaders, and canaries for one-run audits."""

from tf_dp.data.canaries import Canaries
from tf_dp.data.canaries import CanaryKind
from tf_dp.data.canaries import MixedData
from tf_dp.data.canaries import dirac_canaries
from tf_dp.data.canaries import mislabeled_canaries
from tf_dp.data.canaries import mix_canaries
from tf_dp.data.canaries import mix_canaries_into_dataset
from tf_dp.data.canaries import out_of_distribution_canaries
from tf_dp.data.datasets import load_digits
from tf_dp.data.datasets import load_mnist
from tf_dp.data.datasets import load_shakespeare
from tf_dp.data.datasets import shakespeare_lines
from tf_dp.data.distributed import distribute_lots
from tf_dp.data.fixed_size import fixed_size_sampled_batches
from tf_dp.data.lots import declare_sampling
from tf_dp.data.lots import DeclaredSampling
from tf_dp.data.poisson import poisson_sampled_batches
from tf_dp.data.users import fixed_size_sampled_users
from tf_dp.data.users import poisson_sampled_users
