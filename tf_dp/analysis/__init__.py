"""Privacy accounting for tf_dp: pure Python (numpy and scipy), no TensorFlow.

Concern (c) of McMahan & Andrew (2018): the accountant reads what the
mechanisms did (a ledger of sampling and Gaussian sum-query events, or the
parameters of a run) and turns it into an (epsilon, delta) guarantee. Nothing
here touches tensors. The package also holds what every layer of tf_dp
shares without TensorFlow: the argument checks (``checks``) and the
ledger's format (``ledger_schema``); and the empirical side of ε, pure
numpy as well: membership-inference metrics and the ε lower bound they
prove (``membership_inference``, ``lira``), and the one-run audit of
canaries (``one_run``, Steinke, Nasr & Jagielski 2023). Paper
reproductions (DP dropout's own accounting) live in
``tf_dp.reproductions``.
"""

from tf_dp.analysis.allocation import effective_noise_multiplier
from tf_dp.analysis.composition import advanced_composition
from tf_dp.analysis.composition import amplify_by_poisson_sampling
from tf_dp.analysis.composition import gaussian_mechanism_epsilon
from tf_dp.analysis.composition import gaussian_mechanism_noise_multiplier
from tf_dp.analysis.composition import gaussian_zcdp
from tf_dp.analysis.composition import group_privacy_epsilon
from tf_dp.analysis.composition import strong_composition_dp_sgd_epsilon
from tf_dp.analysis.composition import zcdp_rho_for_epsilon
from tf_dp.analysis.composition import zcdp_to_dp_epsilon
from tf_dp.analysis.dp_sgd_privacy import compute_dp_sgd_privacy
from tf_dp.analysis.calibration import compute_batch_size
from tf_dp.analysis.calibration import compute_epochs
from tf_dp.analysis.calibration import compute_noise_multiplier
from tf_dp.analysis.conversion import get_privacy_spent
from tf_dp.analysis.moments_accountant import log_moment
from tf_dp.analysis.moments_accountant import moments_accountant_epsilon
from tf_dp.analysis.rdp import DEFAULT_ORDERS
from tf_dp.analysis.rdp import compute_heterogeneous_rdp
from tf_dp.analysis.rdp import compute_rdp
from tf_dp.analysis.rdp_fixed_size import compute_rdp_fixed_size
from tf_dp.analysis.ledger import compute_epsilon_from_ledger
from tf_dp.analysis.ledger import compute_rdp_from_ledger
from tf_dp.analysis.ledger import epsilon_statement
from tf_dp.analysis.ledger import ledger_privacy_unit
from tf_dp.analysis.ledger import ledger_events
from tf_dp.analysis.ledger import sample_noise_multiplier
from tf_dp.analysis.ledger import to_dp_accounting_events
from tf_dp.analysis.budget import max_additional_steps
from tf_dp.analysis.budget import max_additional_steps_for_events
from tf_dp.analysis.pld import GaussianEvent
from tf_dp.analysis.lira import lira_scores
from tf_dp.analysis.lira import logit_confidence
from tf_dp.analysis.membership_inference import MembershipInferenceReport
from tf_dp.analysis.membership_inference import membership_inference_report
from tf_dp.analysis.membership_inference import one_run_audit_report
from tf_dp.analysis.membership_inference import plot_roc
from tf_dp.analysis.one_run import OneRunAudit
from tf_dp.analysis.one_run import one_run_audit
from tf_dp.analysis.one_run import one_run_epsilon_lower_bound
from tf_dp.analysis.one_run import one_run_p_value
from tf_dp.analysis.pld import PLDAccountant
