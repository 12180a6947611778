"""Where saved models find ``DPOptimizerKeras3``: the module they record.

The class lives in ``tf_dp.keras.backend.keras3_optimizer``; build it with
``tf_dp.DPOptimizer``. Saved models and pickles name this module for it
(registered as ``"tf_dp>DPOptimizerKeras3"``), so it stays.
"""

from tf_dp.keras.backend.keras3_optimizer import DPOptimizerKeras3  # pylint: disable=unused-import
