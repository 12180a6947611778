"""Where saved models find ``DPOptimizerKeras2``: the module they record.

The class lives in ``tf_dp.keras.backend.keras2_optimizer``; build it with
``tf_dp.DPOptimizer``. Keras 2's loader imports the module a ``.keras``
file records for a class that is not registered yet, and files name this
one (the class is registered as ``"tf_dp>DPOptimizerKeras2"``), so it stays.
"""

from tf_dp.keras.backend.keras2_optimizer import DPOptimizerKeras2  # pylint: disable=unused-import
