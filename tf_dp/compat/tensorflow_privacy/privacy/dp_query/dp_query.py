"""TF Privacy's ``dp_query`` module: tf_dp's ``DPQuery`` interface.

The methods and their arguments are TF Privacy's (``initial_global_state``,
``derive_sample_params``, ``initial_sample_state(template)``,
``preprocess_record``, ``accumulate_preprocessed_record``,
``merge_sample_states``, ``get_noised_result`` returning ``(result,
new_global_state, event)``), so a custom query ports by changing its import.
Its event must be a tf_dp event (``tf_dp.dp_query.SumQueryEvent``) for the
ledger to account it.
"""

from tf_dp.dp_query.dp_query import DPQuery  # pylint: disable=unused-import
from tf_dp.dp_query.dp_query import SumAggregationDPQuery  # pylint: disable=unused-import
