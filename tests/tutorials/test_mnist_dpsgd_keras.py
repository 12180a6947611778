"""The main job (``scripts/main.sh``: tutorials/mnist_dpsgd_keras.py) runs
under each sampling on a slice of MNIST and prints its accuracy and epsilon.

One pass over 1024 examples in lots of 128 (q = 1/8: 8 lots), evaluated
on 1000 test examples. The ledger
the run wrote records those lots as drawn; the epsilon printed is its PLD
epsilon (to the 3 decimals printed) and lies below its RDP epsilon; the
accuracy is only checked to be printed and a probability (a short run).
"""

import json
import os
import re
import subprocess
import sys

import pytest

import tf_dp

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


@pytest.mark.slow
@pytest.mark.parametrize("sampling", ["poisson", "fixed_size", "shuffled"])
def test_main_job_trains_and_prints_accuracy_and_epsilon(sampling, tmp_path):
  out = subprocess.run(
      [sys.executable, os.path.join(ROOT, "tutorials", "mnist_dpsgd_keras.py"),
       f"--sampling={sampling}", "--train_examples=1024", "--test_examples=1000",
       "--batch_size=128",
       "--epochs=1", "--verbose=0", f"--out_dir={tmp_path}"],
      capture_output=True, text=True, check=False)
  assert out.returncode == 0, out.stderr[-3000:]
  printed = re.search(r"test_accuracy=([0-9.]+) epsilon=([0-9.]+)",
                      out.stdout)
  assert printed, out.stdout
  accuracy, epsilon = float(printed.group(1)), float(printed.group(2))
  with open(tmp_path / "ledger.json", encoding="utf-8") as f:
    ledger = f.read()
  runs = json.loads(ledger)["runs"]  # run-length encoded samples
  assert sum(run["count"] for run in runs) == 8
  assert {run["sampling"] for run in runs} == {sampling}
  assert all(run["sampling_probability"] == pytest.approx(1 / 8)
             for run in runs)
  assert 0 <= accuracy <= 1
  eps_pld, _ = tf_dp.analysis.compute_epsilon_from_ledger(ledger, 1e-5,
                                                          accountant="pld")
  eps_rdp, _ = tf_dp.analysis.compute_epsilon_from_ledger(ledger, 1e-5,
                                                          accountant="rdp")
  assert epsilon == pytest.approx(eps_pld, abs=5e-4)
  assert 0 < eps_pld <= eps_rdp
