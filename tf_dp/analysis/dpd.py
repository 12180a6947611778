"""Old name of ``tf_dp.reproductions.dpd_accounting`` (kept for one release).

Importing it warns with a ``DeprecationWarning``; it is the same module.
"""

import sys

from tf_dp.analysis import deprecation
from tf_dp.reproductions import dpd_accounting

sys.modules[__name__] = deprecation.moved_module(__name__, dpd_accounting)
