"""Keras integration of tf_dp: ``make_private``, ``DPOptimizer``, callbacks."""

from tf_dp.keras.callbacks import PrivacyBudget
from tf_dp.keras.optimizer import DPOptimizer
from tf_dp.keras.privacy_check import PrivacyCheckError
from tf_dp.keras.privacy_check import check_privacy
from tf_dp.keras.private_model import is_private
from tf_dp.keras.private_model import make_private
