"""Old name of ``tf_dp.reproductions.dp_pca`` (kept for one release).

Importing it warns with a ``DeprecationWarning``; it is the same module.
"""

import sys

from tf_dp.analysis import deprecation
from tf_dp.reproductions import dp_pca

sys.modules[__name__] = deprecation.moved_module(__name__, dp_pca)
