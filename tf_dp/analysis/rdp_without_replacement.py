"""Old name of ``tf_dp.analysis.rdp_fixed_size`` (kept for one release).

Importing it warns with a ``DeprecationWarning``; it is the same module.
"""

import sys

from tf_dp.analysis import deprecation
from tf_dp.analysis import rdp_fixed_size

sys.modules[__name__] = deprecation.moved_module(__name__, rdp_fixed_size)
