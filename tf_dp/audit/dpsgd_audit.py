"""Old name of ``tf_dp.reproductions.audit.dpsgd_audit`` (kept for one release).

The same module object; importing ``tf_dp.audit`` warns.
"""

import sys

from tf_dp.reproductions.audit import dpsgd_audit

sys.modules[__name__] = dpsgd_audit
