"""Empirical privacy audits beside the accountant's epsilon.

For one Gaussian sum query, one step of the real DP-SGD path
(make_private + DPOptimizer) and one lot of a full ``fit`` (a loss given by
name, lots of two batches), it prints the epsilon the ledger/accountant
claims and a Clopper-Pearson lower bound (95% confidence) from a threshold
test on neighbouring inputs, and the same for deliberately broken
mechanisms (noise off; clipping off) whose ledger still claims the noise.
The lower bound must stay below the claim for the real mechanisms and
exceed it for the broken ones. Ends with

  audit gaussian_eps=.. gaussian_lower=.. dpsgd_eps=.. dpsgd_lower=..
        fit_eps=.. fit_lower=.. broken_lower=..

  python benchmarks/audit.py [--quick]
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--quick", action="store_true")
  args = parser.parse_args()
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tf_dp.reproductions.audit import ClipOffQuery, NoiseOffQuery  # pylint: disable=g-import-not-at-top
  from tf_dp.reproductions.audit import dpsgd_audit, gaussian_audit  # pylint: disable=g-import-not-at-top
  from tf_dp.dp_query import GaussianSumQuery  # pylint: disable=g-import-not-at-top
  z = 2.0
  g_trials = 100000 if args.quick else 1000000
  d_trials = 2000 if args.quick else 20000
  print(f"noise multiplier {z}, delta 1e-5, one release, 95% confidence")
  g_eps, g_low = gaussian_audit.audit_gaussian_sum_query(
      GaussianSumQuery(1.0, z), z, trials=g_trials)
  print(f"Gaussian sum query ({g_trials} trials each side): claimed "
        f"{g_eps:.3f}, lower bound {g_low:.3f}")
  d_eps, d_low = dpsgd_audit.audit_dp_sgd_step(tf.keras, z, trials=d_trials)
  print(f"DP-SGD step, Keras 3 ({d_trials} trials each side): claimed "
        f"{d_eps:.3f}, lower bound {d_low:.3f}")
  f_trials = 300 if args.quick else 1500
  f_eps, f_low = dpsgd_audit.audit_dp_sgd_fit(tf.keras, z, trials=f_trials)
  print(f"make_private + fit, loss 'mse', lots of 2 batches, Keras 3 "
        f"({f_trials} trials each side): claimed {f_eps:.3f}, lower bound "
        f"{f_low:.3f}")
  broken = []
  for name, query in (("noise off", NoiseOffQuery(1.0, z)),
                      ("clipping off", ClipOffQuery(1.0, z))):
    b_eps, b_low = dpsgd_audit.audit_dp_sgd_step(tf.keras, z, trials=1000,
                                                 dp_query=query)
    verdict = "DETECTED" if b_low > b_eps else "missed"
    print(f"broken DP-SGD ({name}): ledger claims {b_eps:.3f}, lower bound "
          f"{b_low:.3f} -> {verdict}")
    broken.append(b_low)
  ok = (g_low < g_eps and d_low < d_eps and f_low < f_eps
        and all(b > d_eps for b in broken))
  print("all audits consistent with the claims" if ok else "AUDIT FAILURE")
  print(f"audit gaussian_eps={g_eps:.3f} gaussian_lower={g_low:.3f} "
        f"dpsgd_eps={d_eps:.3f} dpsgd_lower={d_low:.3f} "
        f"fit_eps={f_eps:.3f} fit_lower={f_low:.3f} "
        f"broken_lower={min(broken):.3f}")


if __name__ == "__main__":
  main()
