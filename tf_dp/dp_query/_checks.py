"""Old private home of the mechanisms' argument checks: now
``tf_dp.analysis.checks`` (the one argument-check module).

Kept, without logic of its own, for ``tf_dp/keras/dp_batch_norm.py`` until
it imports ``tf_dp.analysis.checks``; remove it then.
"""

from tf_dp.analysis import checks

non_negative = checks.check_non_negative
positive = checks.check_positive
