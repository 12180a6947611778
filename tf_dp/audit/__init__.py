"""Old home of ``tf_dp.reproductions.audit`` (kept for one release).

Importing it warns with a ``DeprecationWarning``; its names and submodules
are those of ``tf_dp.reproductions.audit``.
"""

from tf_dp.analysis import deprecation
from tf_dp.reproductions.audit import ClipOffQuery  # pylint: disable=unused-import
from tf_dp.reproductions.audit import NoiseOffQuery  # pylint: disable=unused-import
from tf_dp.reproductions.audit import best_threshold_epsilon_lower_bound  # pylint: disable=unused-import
from tf_dp.reproductions.audit import clopper_pearson  # pylint: disable=unused-import
from tf_dp.reproductions.audit import epsilon_lower_bound  # pylint: disable=unused-import

deprecation.warn(__name__, "tf_dp.reproductions.audit", "module",
                 stacklevel=3)
