"""DP-SGD for ``tf.compat.v1`` optimizers and Estimator ``model_fn``s (TF 2.15).

Importing this package does not import ``tf.estimator``; the optimizers work
in any ``tf.compat.v1`` graph (Estimator or Session).
"""

from tf_dp.estimator.checkpoint_ledger import ledger_from_checkpoint
from tf_dp.estimator.dp_optimizer_v1 import DPAdagradOptimizer
from tf_dp.estimator.dp_optimizer_v1 import DPAdamOptimizer
from tf_dp.estimator.dp_optimizer_v1 import DPGradientDescentOptimizer
