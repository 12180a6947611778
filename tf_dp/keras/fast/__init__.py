"""Fast per-example clipping: ghost norms and per-layer rules.

See ``clipped_sum.py`` for the algorithm, ``rule_types.py`` for what a rule
is and ``rules.py`` for the registry.
"""

from tf_dp.keras.fast.clipped_sum import clipping_plan
from tf_dp.keras.fast.clipped_sum import fast_path_unavailable_reason
from tf_dp.keras.fast.clipped_sum import vectorized_map_hazard
from tf_dp.keras.fast.rule_types import Rule
from tf_dp.keras.fast.rules import register_composite
from tf_dp.keras.fast.rules import register_rule
from tf_dp.keras.fast.rules import register_rule_class
