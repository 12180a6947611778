"""Keras integration of tf_dp: ``make_private``, ``DPOptimizer``, callbacks,
``clipping_plan``, membership-inference reports on a trained model and
one-run audits of its canaries.

Importing it registers tf_dp's classes with Keras 3 (Keras 2 finds them by
the module a file records), so ``load_model`` finds them in a fresh
process.
"""

from tf_dp.keras import flavor_classes as _flavor_classes
from tf_dp.keras.callbacks import PrivacyBudget
from tf_dp.keras.canaries import with_dirac_canaries
from tf_dp.keras.fast.clipped_sum import clipping_plan
from tf_dp.keras.group_norm import with_group_normalization
from tf_dp.keras.membership_inference import audit_canaries
from tf_dp.keras.membership_inference import canary_scores
from tf_dp.keras.membership_inference import lira_attack
from tf_dp.keras.membership_inference import loss_threshold_attack
from tf_dp.keras.membership_inference import membership_scores
from tf_dp.keras.membership_inference import train_shadow_models
from tf_dp.keras.optimizer import DPOptimizer
from tf_dp.keras.privacy_check import check_privacy
from tf_dp.keras.private_model import is_private
from tf_dp.keras.private_model import make_private

_flavor_classes.register_saved_classes()

