"""Epsilon of a correlated-noise ledger record: closed forms, a cross-check
with the PLD accountant, and every refusal."""

import json
import math
import warnings

import pytest

from tf_dp.analysis import compute_dp_sgd_privacy
from tf_dp.analysis import correlated_noise_accounting as acc
from tf_dp.analysis import matrix_factorization as mf
from tf_dp.analysis import pld_gaussian
from tf_dp.errors import LedgerFormatError
from tf_dp.errors import PrivacyError


def record(strategy, **changes):
  out = {"format": acc.FORMAT, "strategy": acc.strategy_to_dict(strategy),
         "l2_norm_clip": 2.0, "noise_stddev": 4.0,
         "neighbouring": "zero_out", "promised_passes": 1,
         "promised_min_separation": strategy.steps, "passes": 1,
         "min_separation": None, "steps_run": strategy.steps,
         "inconsistent_steps": 0}
  out.update(changes)
  return out


def test_identity_single_pass_is_one_gaussian():
  s = mf.banded_strategy(30, 1)
  # sigma = 4 / 2 = 2, sens 1, zero-out: mu = 1/2.
  assert acc.correlated_noise_epsilon(record(s), 1e-5) == (
      pld_gaussian.gaussian_dp_epsilon(1e-5, 0.5))


def test_banded_k_passes_replace_one():
  s = mf.banded_strategy(40, 4)
  r = record(s, neighbouring="replace_one", promised_passes=3,
             promised_min_separation=10, passes=3, min_separation=10)
  mu = 2 * math.sqrt(3) / 2.0
  assert acc.correlated_noise_epsilon(r, 1e-5) == pytest.approx(
      pld_gaussian.gaussian_dp_epsilon(1e-5, mu), rel=1e-12)
  # Fewer passes than promised: accounted for what was run.
  r.update(passes=2)
  assert acc.correlated_noise_epsilon(r, 1e-5) == pytest.approx(
      pld_gaussian.gaussian_dp_epsilon(1e-5, 2 * math.sqrt(2) / 2.0),
      rel=1e-12)


def test_identity_k_passes_agrees_with_the_pld_accountant():
  # C = I, every example in every step of k passes (batch = n, q = 1):
  # k unamplified Gaussians with replace-one sensitivity 2C, which tf_dp's
  # PLD accountant composes numerically (an upper bound, a hair above).
  k, sigma = 5, 3.0
  s = mf.banded_strategy(k, 1)
  r = record(s, neighbouring="replace_one", noise_stddev=2.0 * sigma,
             promised_passes=k, promised_min_separation=1, passes=k,
             min_separation=1)
  eps = acc.correlated_noise_epsilon(r, 1e-5)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    pld, _ = compute_dp_sgd_privacy(n=100, batch_size=100,
                                    noise_multiplier=sigma, epochs=k,
                                    delta=1e-5, sampling="fixed_size")
  assert eps <= pld <= eps * 1.01


def test_tree_single_pass():
  s = mf.tree_strategy(16)
  assert acc.correlated_noise_epsilon(record(s), 1e-6) == pytest.approx(
      pld_gaussian.gaussian_dp_epsilon(1e-6, math.sqrt(5) / 2), rel=1e-12)


def test_no_steps_cost_nothing_and_no_noise_is_infinite():
  s = mf.banded_strategy(10, 2)
  assert acc.correlated_noise_epsilon(record(s, steps_run=0), 1e-5) == 0.0
  assert acc.correlated_noise_epsilon(record(s, noise_stddev=0.0),
                                      1e-5) == math.inf


def test_json_round_trip():
  s = mf.banded_strategy(20, 3)
  r = record(s)
  assert acc.correlated_noise_epsilon(json.dumps(r), 1e-5) == (
      acc.correlated_noise_epsilon(r, 1e-5))


@pytest.mark.parametrize("changes,match", [
    ({"steps_run": 21}, "built for 20"),
    ({"passes": 2, "min_separation": 10}, "at most 1"),
    ({"promised_passes": 2, "promised_min_separation": 10, "passes": 2,
      "min_separation": 9}, "9 steps apart"),
    ({"promised_passes": 2, "promised_min_separation": 10, "passes": 2,
      "min_separation": None}, "None steps apart"),
    ({"inconsistent_steps": 1}, "another clip"),
    ({"passes": 0}, "record_participation"),
])
def test_refuses_a_run_beyond_its_promise(changes, match):
  r = record(mf.banded_strategy(20, 3), **changes)
  with pytest.raises(PrivacyError, match=match):
    acc.correlated_noise_epsilon(r, 1e-5)


def test_refuses_a_malformed_record():
  s = mf.banded_strategy(20, 3)
  altered = record(s)
  altered["strategy"] = dict(altered["strategy"],
                             coefficients=[1.0, 0.0, 0.0])
  with pytest.raises(LedgerFormatError, match="fingerprint"):
    acc.correlated_noise_epsilon(altered, 1e-5)
  missing = record(s)
  del missing["steps_run"]
  with pytest.raises(LedgerFormatError, match="steps_run"):
    acc.correlated_noise_epsilon(missing, 1e-5)
  with pytest.raises(LedgerFormatError, match="format"):
    acc.correlated_noise_epsilon(record(s, format="x"), 1e-5)
