"""Old name of ``tf_dp.reproductions.audit.broken_queries`` (kept for one release).

The same module object; importing ``tf_dp.audit`` warns.
"""

import sys

from tf_dp.reproductions.audit import broken_queries

sys.modules[__name__] = broken_queries
