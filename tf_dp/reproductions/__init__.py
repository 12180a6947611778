"""Paper reproductions, kept apart from the proven mechanisms and accountants.

What lives here reproduces or checks published work on top of tf_dp; none of
it is needed to train privately or to account a ledger:

* ``dpd``: differentially private dropout (Ermis & Cemgil 2017, Algorithm 1)
  on the Keras front end (``make_dpd_optimizer``);
* ``dpd_accounting``: that paper's own accounting (DPD-AC, DPD-zCDP), pure
  Python; its epsilon is the paper's claim, not a proven guarantee (the
  proven epsilon of a run is its ledger's, ``tf_dp.analysis``);
* ``dp_pca``: DP-PCA of Abadi et al. (2016), Sec. 4
  (``dp_principal_directions``);
* ``audit``: empirical lower bounds on epsilon (Clopper-Pearson) and
  deliberately broken mechanisms that the audits must catch.

Importing this package imports nothing else: names are resolved on first
use (``dpd_accounting`` needs no TensorFlow).
"""

import importlib

# Public name -> module that defines it.
_LAZY_NAMES = {
    "audit": "tf_dp.reproductions.audit",
    "dp_pca": "tf_dp.reproductions.dp_pca",
    "dpd": "tf_dp.reproductions.dpd",
    "dpd_accounting": "tf_dp.reproductions.dpd_accounting",
    "dp_principal_directions": "tf_dp.reproductions.dp_pca",
    "make_dpd_optimizer": "tf_dp.reproductions.dpd",
    "dpd_dropout_rates": "tf_dp.reproductions.dpd_accounting",
    "dpd_epsilon": "tf_dp.reproductions.dpd_accounting",
    "dpd_noise_multiplier": "tf_dp.reproductions.dpd_accounting",
}


def __getattr__(name):
  module_name = _LAZY_NAMES.get(name)
  if module_name is None:
    raise AttributeError(
        f"module 'tf_dp.reproductions' has no attribute {name!r}")
  module = importlib.import_module(module_name)
  value = module if module_name.endswith("." + name) else getattr(module, name)
  globals()[name] = value
  return value


def __dir__():
  return sorted(list(globals()) + list(_LAZY_NAMES))
