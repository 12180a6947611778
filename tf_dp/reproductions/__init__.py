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

from tf_dp import _lazy_names

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


__getattr__, __dir__ = _lazy_names(__name__, _LAZY_NAMES)
