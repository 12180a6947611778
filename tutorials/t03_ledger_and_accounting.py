# %% [markdown]
# # The privacy ledger and post-hoc accounting
# The ledger records what the mechanisms did (sampling events and Gaussian sum
# queries); the accountant reads it after training (McMahan & Andrew 2018, Sec. 5).
# You can export it and re-process it later with another accountant.
# **Privacy claim:** whatever accountant you use, it only sees the recorded events.

# %%
import json
import tensorflow as tf
import tf_dp

ledger = tf_dp.PrivacyLedger(population_size=10000, sampling_probability=0.01,
                             sampling="poisson")
query = tf_dp.QueryWithLedger(tf_dp.GaussianSumQuery(l2_norm_clip=1.0, stddev=1.1), ledger)
state = query.initial_global_state()
for _ in range(100):  # 100 samples, each a noised sum of clipped records
  sample = query.initial_sample_state(tf.zeros([5]))
  sample = query.accumulate_record(query.derive_sample_params(state), sample,
                                   tf.random.normal([5]))
  _, state, _ = query.get_noised_result(sample, state)

# %%
exported = ledger.to_json()  # plain JSON, run-length encoded: keep it with the model
print(json.loads(exported)["runs"][0])  # 100 identical samples: one run
eps, _ = tf_dp.analysis.compute_epsilon_from_ledger(exported, delta=1e-5)
print(f"tf_dp PLD accountant (default): epsilon={eps:.3f}")
eps, order = tf_dp.analysis.compute_epsilon_from_ledger(exported, delta=1e-5,
                                                        accountant="rdp")
print(f"tf_dp RDP accountant: epsilon={eps:.3f} (order {order:g})")

# %% [markdown]
# Re-process the same ledger with Google's `dp_accounting` (if installed).

# %%
try:
  import dp_accounting
  acc = dp_accounting.rdp.RdpAccountant([float(o) for o in range(2, 64)])
  for event in tf_dp.analysis.to_dp_accounting_events(exported):
    acc.compose(event)
  print(f"dp_accounting: epsilon={acc.get_epsilon(1e-5):.3f}")
except ImportError:
  print("dp_accounting is not installed")
