"""Old name of ``tf_dp.reproductions.audit.bounds`` (kept for one release).

The same module object; importing ``tf_dp.audit`` warns.
"""

import sys

from tf_dp.reproductions.audit import bounds

sys.modules[__name__] = bounds
