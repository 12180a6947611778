"""The allowlist: how each known TensorFlow operation carries example rows.

Importing this module registers every rule (``arithmetic``, ``images``,
``layout``, ``reshapes``, ``lists``) in ``tf_dp.core.provenance.registry``
and gives the walker what it needs: ``output_labels(op, inputs, forward)``
(the labels of an operation's outputs from its inputs'), the ``Context``
rules read, and which operations may write a variable. Control flow and
function calls (``If``, ``While``, ``PartitionedCall``) are handled by
``tf_dp.core.provenance.walker``, which analyses their bodies.
"""

# pylint: disable=unused-import
from tf_dp.core.provenance import arithmetic
from tf_dp.core.provenance import images
from tf_dp.core.provenance import layout
from tf_dp.core.provenance import lists
from tf_dp.core.provenance import reshapes
# pylint: enable=unused-import
from tf_dp.core.provenance.registry import Context
from tf_dp.core.provenance.registry import data_inputs
from tf_dp.core.provenance.registry import in_context
from tf_dp.core.provenance.registry import known
from tf_dp.core.provenance.registry import output_labels
from tf_dp.core.provenance.registry import writes_state

__all__ = ["Context", "data_inputs", "in_context", "known", "output_labels",
           "writes_state"]
