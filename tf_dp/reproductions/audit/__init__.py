"""Empirical privacy audits: lower bounds on epsilon from distinguishing tests.

A (epsilon, delta)-DP mechanism bounds every test's error rates:
``FPR + e^eps FNR >= 1 - delta`` and ``FNR + e^eps FPR >= 1 - delta``
(Kairouz, Oh & Viswanath 2015). Running a mechanism many times on
neighbouring inputs, thresholding its output, and bounding the error rates
with Clopper-Pearson intervals gives an epsilon that the mechanism provably
exceeds with the stated confidence. If that lower bound is above the
accountant's epsilon, the implementation (or the accountant) is broken.
"""

from tf_dp.reproductions.audit.bounds import clopper_pearson
from tf_dp.reproductions.audit.bounds import epsilon_lower_bound
from tf_dp.reproductions.audit.bounds import best_threshold_epsilon_lower_bound
from tf_dp.reproductions.audit.broken_queries import ClipOffQuery
from tf_dp.reproductions.audit.broken_queries import NoiseOffQuery
