# %% [markdown]
# # User-level DP on Shakespeare: a role and all their lines
# Text comes from people, and one person writes many examples. LEAF's
# Shakespeare task (Caldas et al. 2018) has such natural users: every role of
# every play is a user, and the model predicts the next character from the 80
# before it. Hamlet alone speaks 766 of the 49,950 training windows.
#
# **Privacy claims.** Example-level (ε, δ)-DP: adding or removing any one
# 80-character window changes the probability of any training outcome by at
# most a factor e^ε, except with probability δ. User-level (ε, δ)-DP: the
# same for adding or removing one role with *all* their lines.
#
# The same model is trained at the same ε = 8, δ = 1e-5 with the two units,
# following the comparison of Charles et al. (2024) ("Fine-Tuning Large
# Language Models with User-Level Differential Privacy"): example-level
# sampling (ELS: examples drawn, each clipped; a user's guarantee then comes
# from group privacy over their examples) against user-level sampling (ULS:
# users drawn, each user's summed gradient clipped), as McMahan et al. (2018)
# trained user-level DP language models on natural users.

# %%
import os
import time
import warnings

import numpy as np
import tensorflow as tf
import tf_dp

QUICK = os.environ.get("TF_DP_QUICK") == "1"  # small settings for CI
EPSILON, DELTA = 8.0, 1e-5  # the same target for every private run
# Passes over the windows (the two example-level runs, the non-private one)
# or over the users (ULS); each private run is repeated with fresh lots
# and noise.
EPOCHS = (dict(non_private=1, example=0.5, els=1, uls=2) if QUICK else
          dict(non_private=10, example=20, els=20, uls=60))
REPEATS = 1 if QUICK else 3
CONTEXT = 20  # the model reads the last 20 of a window's 80 characters
data = tf_dp.data.load_shakespeare()  # LEAF: 80 characters -> the next one
x = data.train.inputs[:, -CONTEXT:].astype("int32")
y, user_ids = data.train.targets, data.train.user_ids
x_test = data.test.inputs[:, -CONTEXT:].astype("int32")
y_test = data.test.targets
n, n_users = len(x), len(np.unique(user_ids))
print(f"{n} training windows of {n_users} users; {len(y_test)} test windows "
      f"of {len(np.unique(data.test.user_ids))} other users")

# %% [markdown]
# ## How many examples one user contributes
# Most roles say little, a few say a lot: the example-level guarantee covers
# one window, and the most active users have hundreds.

# %%
per_user = np.bincount(user_ids)
per_user = per_user[per_user > 0]
ranked = np.sort(per_user)[::-1]
top_tenth = ranked[:len(ranked) // 10].sum() / n
p90, p99 = np.percentile(per_user, [90, 99])
print(f"windows per user: median {np.median(per_user):.0f}, 90th percentile "
      f"{p90:.0f}, 99th {p99:.0f}, max {per_user.max()}; the 10% most active "
      f"users hold {top_tenth:.0%} of the windows")
for u in np.argsort(-np.bincount(user_ids))[:5]:
  print(f"  {data.users[u]:40s} {np.sum(user_ids == u):4d} windows")

# %% [markdown]
# ## One model, one training function
# A small character model (an embedding of the 20 characters, one hidden
# layer): tf_dp clips it on the fast path (Embedding and Dense rules).

# %%
VOCABULARY = len(data.vocabulary)
LOSS = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
LEARNING_RATE = 0.01


def character_model():
  return tf.keras.Sequential([
      tf.keras.layers.Input((CONTEXT,), dtype="int32"),
      tf.keras.layers.Embedding(VOCABULARY, 8),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(128, activation="relu"),
      tf.keras.layers.Dense(VOCABULARY)])


def accuracy(model):
  return model.evaluate(x_test, y_test, verbose=0, batch_size=1024)[1]


def train_private(lots, **dp_options):
  """Trains REPEATS fresh models on the sampler's lots (new lots on every
  pass); returns the last model, the test accuracies and seconds per run."""
  accuracies, start = [], time.time()
  for seed in range(REPEATS):
    tf.keras.utils.set_random_seed(seed)  # the initial weights
    model = tf_dp.keras.make_private(character_model())
    model.compile(optimizer=tf_dp.DPOptimizer(
        tf.keras.optimizers.Adam(LEARNING_RATE), l2_norm_clip=1.0,
        sampling="poisson", **dp_options), loss=LOSS, metrics=["accuracy"])
    model.fit(lots, verbose=0, shuffle=False)  # the lots are drawn already
    accuracies.append(accuracy(model))
  return model, accuracies, (time.time() - start) / REPEATS


tf.keras.utils.set_random_seed(0)
baseline = character_model()
baseline.compile(optimizer=tf.keras.optimizers.Adam(0.003), loss=LOSS,
                 metrics=["accuracy"])
start = time.time()
baseline.fit(x, y, batch_size=512, epochs=EPOCHS["non_private"], verbose=0)
results = {"non-private": dict(accuracies=[accuracy(baseline)],
                               seconds=time.time() - start)}
print(f"non-private: test accuracy {accuracy(baseline):.3f} (always "
      f"predicting a space: {np.mean(y_test == 1):.3f})")

# %% [markdown]
# ## Example-level DP-SGD at ε = 8 per window
# Poisson lots of windows (each in a lot with probability q), each window's
# gradient clipped to 1, noise calibrated so that the ledger's ε is 8.

# %%
BATCH = 512
example_q = BATCH / n
z_example = tf_dp.analysis.compute_noise_multiplier(
    n, BATCH, EPSILON, EPOCHS["example"], DELTA)
example_steps = round(EPOCHS["example"] / example_q)
lots = tf_dp.data.poisson_sampled_batches(x, y, example_q, example_steps)
model, accuracies, seconds = train_private(
    lots, noise_multiplier=z_example, sampling_probability=example_q,
    population_size=n)
ledger = model.optimizer.ledger
eps = tf_dp.analysis.compute_epsilon_from_ledger(ledger, DELTA)[0]
print(f"{example_steps} lots of {BATCH} windows on average, noise multiplier "
      f"{z_example:.3f}")
print(tf_dp.analysis.epsilon_statement(
    eps, DELTA, tf_dp.analysis.ledger_privacy_unit(ledger)))
results["example-level DP-SGD"] = dict(
    accuracies=accuracies, seconds=seconds, unit="window", epsilon=eps)

# %% [markdown]
# ## What ε = 8 per window says about a user
# Group privacy (Vadhan 2017, Lemma 2.2): (ε, δ')-DP for one record gives
# (kε, δ'(e^{kε} − 1)/(e^ε − 1))-DP for k records. To keep the user's δ at
# 1e-5 the example-level δ' must shrink exponentially in k, so the bound
# grows fast and soon says nothing (∞). It is an upper bound: accountants
# that know how a user's k examples are sampled are tighter (Charles et al.
# 2024 derive one for ELS); tf_dp implements group privacy.

# %%
USER_SIZES = (1, 2, 4, 16, int(per_user.max()))


def example_epsilon_at(sampling_probability, noise_multiplier, steps):
  """delta -> epsilon of a run of Poisson lots over examples: the smaller of
  two valid bounds, PLD (tighter) and RDP (which reaches deltas below the
  PLD accountant's resolution of about 1e-15, where PLD says inf)."""
  pld = tf_dp.analysis.PLDAccountant().compose(tf_dp.analysis.GaussianEvent(
      "poisson", sampling_probability, noise_multiplier), steps)
  orders = tf_dp.analysis.DEFAULT_ORDERS
  rdp = tf_dp.analysis.compute_rdp(sampling_probability, noise_multiplier,
                                   steps, orders)

  def epsilon_at(delta):
    with warnings.catch_warnings():  # tiny deltas use the largest order
      warnings.simplefilter("ignore")
      by_rdp = tf_dp.analysis.get_privacy_spent(orders, rdp,
                                                target_delta=delta)[0]
    return min(pld.get_epsilon(delta), by_rdp)
  return epsilon_at


def user_epsilon(epsilon_at, k):
  """Epsilon at DELTA for a user with k examples, by group privacy."""
  return tf_dp.analysis.group_privacy_epsilon(epsilon_at, k, DELTA)


epsilon_at = example_epsilon_at(example_q, z_example, example_steps)
assert abs(epsilon_at(DELTA) - eps) < 1e-9  # the ledger's epsilon (PLD)
results["example-level DP-SGD"]["user_epsilons"] = [
    user_epsilon(epsilon_at, k) for k in USER_SIZES]
for k, e in zip(USER_SIZES, results["example-level DP-SGD"]["user_epsilons"]):
  print(f"a user with {k:3d} windows: epsilon {e:.4g}")

# %% [markdown]
# ## ELS: at most K windows per user, ε = 8 per user by group privacy
# Charles et al.'s example-level sampling: keep at most K of each user's
# windows (a random subset, drawn once), then train example-level DP-SGD
# with the noise that group privacy over K windows needs for ε = 8 per
# user. Every user, Hamlet included, then has at most K windows in the data.

# %%
K = 16  # the most windows of one user in the data (ELS) or in a lot (ULS)
rng = np.random.default_rng(0)
keep = np.concatenate([rng.permutation(np.flatnonzero(user_ids == u))[:K]
                       for u in np.unique(user_ids)])
capped_q = BATCH / len(keep)
capped_steps = round(EPOCHS["els"] / capped_q)
_, z_capped = tf_dp.analysis.search.monotone_boundary(
    lambda z: user_epsilon(example_epsilon_at(capped_q, z, capped_steps),
                           K) > EPSILON,
    start=0.0, limit=1e4, integer=False, tolerance=1e-3)
lots = tf_dp.data.poisson_sampled_batches(x[keep], y[keep], capped_q,
                                          capped_steps)
model, accuracies, seconds = train_private(
    lots, noise_multiplier=z_capped, sampling_probability=capped_q,
    population_size=len(keep))
epsilon_at = example_epsilon_at(capped_q, z_capped, capped_steps)
print(f"{len(keep)} windows kept; {capped_steps} lots of {BATCH} windows on "
      f"average, noise multiplier {z_capped:.3f}: epsilon "
      f"{epsilon_at(DELTA):.3f} per window, {user_epsilon(epsilon_at, K):.3f}"
      f" per user")
results[f"ELS (<= {K} windows per user)"] = dict(
    accuracies=accuracies, seconds=seconds, unit="window",
    epsilon=epsilon_at(DELTA),
    user_epsilons=[user_epsilon(epsilon_at, min(k, K)) for k in USER_SIZES])

# %% [markdown]
# ## User-level DP-SGD (ULS) at ε = 8 per user
# Lots of users: each user is in a lot with probability q and brings at most
# K of their windows (a fresh random subset per lot). The user's K rows of a
# batch are one record: their summed gradient is clipped to 1, and the
# ledger counts users (n = 1079, q over users).

# %%
USERS_PER_LOT = 216
user_q = USERS_PER_LOT / n_users
z_user = tf_dp.analysis.compute_noise_multiplier(
    n_users, USERS_PER_LOT, EPSILON, EPOCHS["uls"], DELTA)
user_steps = round(EPOCHS["uls"] / user_q)
lots = tf_dp.data.poisson_sampled_users(x, y, user_ids, user_q, user_steps,
                                        max_examples_per_user=K)
model, accuracies, seconds = train_private(
    lots, noise_multiplier=z_user, sampling_probability=user_q,
    population_size=n_users, privacy_unit="user", max_examples_per_user=K)
ledger = model.optimizer.ledger
eps_user = tf_dp.analysis.compute_epsilon_from_ledger(ledger, DELTA)[0]
print(f"{user_steps} lots of {USERS_PER_LOT} users on average (at most {K} "
      f"windows each), noise multiplier {z_user:.3f}")
print(tf_dp.analysis.epsilon_statement(
    eps_user, DELTA, tf_dp.analysis.ledger_privacy_unit(ledger)))
results["user-level DP-SGD (ULS)"] = dict(
    accuracies=accuracies, seconds=seconds, unit="user", epsilon=eps_user,
    user_epsilons=[eps_user] * len(USER_SIZES))  # whatever k

# %% [markdown]
# ## The comparison
# ε per user for users of 1 to 766 windows (the most active), at δ = 1e-5,
# and the test accuracy on held-out users.

# %%
print(f"{'':36s}{'epsilon':>9s}  epsilon per user with k windows")
print(f"{'run':29s}{'unit':>7s}{'(unit)':>9s}  "
      + "".join(f"{f'k={k}':>7s}" for k in USER_SIZES)
      + f"  {'accuracy':>9s}{'':8s}{'s/run':>5s}")
for name, r in results.items():
  user_epsilons = r.get("user_epsilons", [np.inf] * len(USER_SIZES))
  spread = (f" ± {np.std(r['accuracies']):.3f}" if len(r["accuracies"]) > 1
            else "")  # the standard deviation over the repeats
  print(f"{name:29s}{r.get('unit', '-'):>7s}{r.get('epsilon', np.inf):9.3g}  "
        + "".join(f"{e:7.3g}" for e in user_epsilons)
        + f"  {np.mean(r['accuracies']):9.3f}{spread:8s}{r['seconds']:5.0f}")
assert abs(results["example-level DP-SGD"]["epsilon"] - EPSILON) < 0.05
assert abs(eps_user - EPSILON) < 0.05
assert all(np.isfinite(r["accuracies"]).all() for r in results.values())
