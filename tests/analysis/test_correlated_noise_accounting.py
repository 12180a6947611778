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


def test_a_run_stopped_early_is_accounted_for_its_released_rows():
  # Banded, 2 of 40 steps: the rows released are C[:2, :2], whose first
  # column holds c_0, c_1: sens^2 = c_0^2 + c_1^2 (< 1, the whole C's).
  s = mf.banded_strategy(40, 4)
  c = s.coefficients
  r = record(s, steps_run=2)
  assert acc.correlated_noise_epsilon(r, 1e-5) == pytest.approx(
      pld_gaussian.gaussian_dp_epsilon(
          1e-5, math.sqrt(c[0]**2 + c[1]**2) / 2), rel=1e-12)
  # Tree of 16 leaves, 5 steps: leaf 0 is in the released nodes [0, 1),
  # [0, 2), [0, 4): sens^2 = 3 = ceil(log2(5 + 1)) (Kairouz et al. 2021).
  r = record(mf.tree_strategy(16), steps_run=5)
  assert acc.correlated_noise_epsilon(r, 1e-5) == pytest.approx(
      pld_gaussian.gaussian_dp_epsilon(1e-5, math.sqrt(3) / 2), rel=1e-12)


def test_budget_plan_is_exact():
  """max_steps_within_budget against epsilon_after_steps at every t."""
  for strategy, per_pass in ((mf.banded_strategy(20, 4), 5),
                             (mf.tree_strategy(16, 2), 4)):
    eps = [acc.epsilon_after_steps(
        strategy, t, 2.0, 1e-5, "replace_one", max(1, -(-t // per_pass)),
        per_pass if t > per_pass else None)
           for t in range(strategy.steps + 1)]
    assert eps == sorted(eps) and eps[0] == 0.0
    for target in (0.5 * (eps[3] + eps[4]), eps[7], eps[-1] + 1.0):
      allowed = acc.max_steps_within_budget(strategy, 2.0, target, 1e-5,
                                            per_pass)
      assert allowed == max(t for t, e in enumerate(eps) if e <= target)
@pytest.mark.parametrize("changes,match", [
    # A key this format does not have is refused, never ignored.
    ({"sampling_probability": 0.01}, r"unknown \['sampling_probability'\]"),
    ({"strategy": "banded"}, r"strategy must be a dict"),
    ({"inconsistent_steps": 0.5}, r"inconsistent_steps must be an integer"),
    ({"inconsistent_steps": "0"}, r"inconsistent_steps.*got '0'"),
    ({"passes": True}, r"passes must be an integer >= 0; got True"),
    ({"promised_passes": 0}, r"promised_passes must be an integer >= 1"),
    ({"promised_passes": 2, "passes": 2, "min_separation": "20"},
     r"min_separation.*got '20'"),
    ({"neighbouring": "add_remove"}, r"neighbouring must be one of"),
    ({"noise_stddev": math.nan}, r"noise_stddev.*got nan"),
    ({"l2_norm_clip": -1.0}, r"l2_norm_clip.*got -1\.0"),
])
def test_every_field_of_a_record_is_validated_by_name(changes, match):
  r = dict(record(mf.banded_strategy(20, 3)), **changes)
  with pytest.raises(LedgerFormatError, match=match):
    acc.correlated_noise_epsilon(r, 1e-5)
  with pytest.raises(LedgerFormatError, match=match):
    acc.correlated_noise_epsilon(json.dumps(r), 1e-5)


@pytest.mark.parametrize("changes,match", [
    ({"origin": "v0"}, r"strategy must have exactly the keys.*unknown "
                       r"\['origin'\]"),
    ({"coefficients": ["1.0", 0.5, 0.25]},
     r"strategy\.coefficients\[0\] must be a finite real number; got '1\.0'"),
    ({"kind": "full"}, r"strategy\.kind must be one of"),
    ({"steps": 2.5}, r"strategy\.steps must be an integer >= 1; got 2\.5"),
    ({"coefficients": [1.0] * 25}, r"strategy: A strategy of 25 bands"),
])
def test_every_field_of_a_strategy_is_validated_by_name(changes, match):
  r = record(mf.banded_strategy(20, 3))
  r["strategy"] = dict(r["strategy"], **changes)
  with pytest.raises(LedgerFormatError, match=match):
    acc.correlated_noise_epsilon(r, 1e-5)
