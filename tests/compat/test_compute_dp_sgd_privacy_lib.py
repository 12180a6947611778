"""TF Privacy's accounting tests, ported to ``tf_dp.compat.tensorflow_privacy``.

Inputs and expected numbers are TF Privacy's published ones, from
``tensorflow_privacy/privacy/analysis/compute_dp_sgd_privacy_test.py`` and
``compute_noise_from_budget_test.py``. No TensorFlow is imported here.
"""

import math
import subprocess
import sys
import warnings

import pytest

from tf_dp.analysis import dp_sgd_privacy
from tf_dp.compat.tensorflow_privacy.privacy.analysis import compute_dp_sgd_privacy_lib as lib
from tf_dp.compat.tensorflow_privacy.privacy.analysis import compute_noise_from_budget_lib as noise_lib

STATEMENT_KWARGS = dict(number_of_examples=10000, batch_size=64,
                        num_epochs=5.0, noise_multiplier=2.0, delta=1e-6)


def _eps(n, batch_size, noise_multiplier, epochs, delta):
  with pytest.warns(UserWarning, match="assumes Poisson sampling"):
    return lib.compute_dp_sgd_privacy(n, batch_size, noise_multiplier, epochs,
                                      delta)


@pytest.mark.parametrize("n,batch_size,noise,epochs,delta,eps,order", [
    (60000, 150, 1.3, 15, 1e-5, 0.7242234026109595, 19.0),
    (100000, 100, 1.0, 30, 1e-7, 1.4154988495444842, 13.0),
    (100000000, 1024, 0.1, 10, 1e-7, 5907982.3113978775, 1.25),
])
def test_compute_dp_sgd_privacy_published_values(n, batch_size, noise, epochs,
                                                  delta, eps, order):
  """compute_dp_sgd_privacy_test.py, test_compute_dp_sgd_privacy: same
  accountant (RDP, TF Privacy's orders, tight conversion); tf_dp's exact RDP
  agrees to 1e-9 relative (float rounding of a different summation)."""
  with warnings.catch_warnings():  # Order 1.25 is the edge in the third case.
    warnings.simplefilter("ignore", RuntimeWarning)
    got_eps, got_order = _eps(n, batch_size, noise, epochs, delta)
  assert got_eps == pytest.approx(eps, rel=1e-9)
  assert got_order == order


def test_readme_case_and_pld_is_tighter():
  """The brief's and TF Privacy README's MNIST run (n 60000, batch 256,
  noise 1.1, 60 epochs, delta 1e-5): 2.597 by RDP (TF Privacy's number with
  the tight conversion); tf_dp's PLD accountant gives less for the same run."""
  eps, order = _eps(60000, 256, 1.1, 60, 1e-5)
  assert eps == pytest.approx(2.5971, abs=1e-4)
  assert order == 8.0
  pld_eps, _ = dp_sgd_privacy.compute_dp_sgd_privacy(60000, 256, 1.1, 60,
                                                     1e-5, accountant="pld")
  assert pld_eps == pytest.approx(2.3818, abs=1e-3)
  assert pld_eps < eps


def test_batch_larger_than_dataset_is_refused():
  with pytest.raises(ValueError, match="batch_size"):
    _eps(100, 101, 1.0, 1, 1e-5)


STATEMENT_HEAD = """\
DP-SGD performed over 10000 examples with 64 examples per iteration, noise
multiplier 2.0 for 5.0 epochs with microbatching, and {bound}

This privacy guarantee protects the release of all model checkpoints in addition
to the final model.

Example-level DP with add-or-remove-one adjacency at delta = 1e-06 computed with
tf_dp's {acc} accounting:
    Epsilon with each example occurring once per epoch:  {once:>12}
    Epsilon assuming Poisson sampling (*):               {poisson:>12}
"""


@pytest.mark.parametrize("acc,once,poisson", [("RDP", "13.376", "1.616"),
                                              ("PLD", "12.595", "1.199")])
def test_statement_example_level_published_values(acc, once, poisson):
  """compute_dp_sgd_privacy_test.py, test_dp_sgd_privacy_statement_no_user_dp
  _with_rdp / _with_pld: TF Privacy's example-level epsilons to the 3
  decimals it prints, from tf_dp's accountants (RDP on a grid with the
  orders 1.1, 1.2, ..., 10.9 of dp_accounting, PLD at grid spacing 1e-4)."""
  statement = lib.compute_dp_sgd_privacy_statement(
      **STATEMENT_KWARGS, accountant_type=getattr(lib.AccountantType, acc))
  head = STATEMENT_HEAD.format(
      bound="no bound on number of\nexamples per user.", acc=acc, once=once,
      poisson=poisson)
  assert statement.startswith(head)
  assert "No user-level privacy guarantee is possible" in statement
  assert "(Chua et al. 2024)" in statement  # The footnote says what holds.


def _user_lines(statement):
  lines = statement.split("User-level DP")[1].splitlines()
  return [float(l.split()[-1]) if "inf" not in l else math.inf
          for l in lines if l.startswith("    Epsilon")]


def test_statement_user_level_rdp():
  """compute_dp_sgd_privacy_test.py, test_dp_sgd_privacy_statement_user_dp
  _with_rdp (3 examples per user): TF Privacy prints 56.224 and 6.425. The
  Poisson value is the same group-privacy computation (to 3 decimals); the
  once-per-epoch value is the RDP of a Gaussian of noise 2/2/3, which tf_dp
  evaluates on a finer order grid: 56.202, lower (both are upper bounds)."""
  statement = lib.compute_dp_sgd_privacy_statement(**STATEMENT_KWARGS,
                                                   max_examples_per_user=3)
  assert "at most 3 examples per\nuser." in statement
  once, poisson = _user_lines(statement)
  assert once == pytest.approx(56.202, abs=1e-3)
  assert once <= 56.224
  assert poisson == pytest.approx(6.425, abs=1e-3)
  assert "(**)" not in statement


def test_statement_user_level_infinite():
  """..._user_dp_infinite_with_rdp (10 per user): TF Privacy prints 366.374
  and inf (**); tf_dp 365.260 (finer orders) and inf (**)."""
  statement = lib.compute_dp_sgd_privacy_statement(**STATEMENT_KWARGS,
                                                   max_examples_per_user=10)
  once, poisson = _user_lines(statement)
  assert once == pytest.approx(365.260, abs=1e-3)
  assert math.isinf(poisson)
  assert "    inf (**)" in statement and "\n(**) A finite" in statement


def test_statement_user_level_pld_is_group_privacy():
  """..._user_dp_with_pld (2 per user): TF Privacy prints 30.579 and 2.532.
  The once-per-epoch value is the same (a Gaussian of noise 1/2): 30.579.
  With Poisson sampling TF Privacy used a mixture-of-Gaussians PLD (Ganesh
  2024); tf_dp uses group privacy on its PLD epsilon, a valid but larger
  bound: 2.671."""
  statement = lib.compute_dp_sgd_privacy_statement(
      **STATEMENT_KWARGS, max_examples_per_user=2, accountant_type="PLD")
  once, poisson = _user_lines(statement)
  assert once == pytest.approx(30.579, abs=1e-3)
  assert poisson == pytest.approx(2.671, abs=1e-3)
  assert poisson > 2.532


def test_user_privacy_one_example_per_user_equals_example_level():
  """compute_dp_sgd_privacy_test.py, test_user_privacy_one_example_per_user
  (epochs 1.2, noise 0.7, delta 1e-5)."""
  for acc in lib.AccountantType:
    example = lib._example_epsilon(1.2, 0.7, 1e-5, True, None, acc)  # pylint: disable=protected-access
    user = lib._user_epsilon(1.2, 0.7, 1e-5, 1, True, None, acc)  # pylint: disable=protected-access
    assert user == example


@pytest.mark.parametrize("noise,k", [(0.9, 2), (1.1, 3), (2.3, 13)])
def test_user_privacy_vadhan_consistency(noise, k):
  """compute_dp_sgd_privacy_test.py, test_user_privacy_epsilon_delta
  _consistency: at the user delta that Vadhan's Lemma 2.2 gives for an
  example-level (eps, 1e-8), the user epsilon is k * eps (5 epochs,
  q 2e-4, RDP)."""
  rdp = lib.AccountantType.RDP
  example_eps = lib._example_epsilon(5, noise, 1e-8, True, 2e-4, rdp)  # pylint: disable=protected-access
  user_delta = math.exp(math.log(1e-8) + lib._log_expm1(k * example_eps)  # pylint: disable=protected-access
                        - lib._log_expm1(example_eps))  # pylint: disable=protected-access
  user_eps = lib._user_epsilon(5, noise, user_delta, k, True, 2e-4, rdp)  # pylint: disable=protected-access
  assert user_eps == pytest.approx(k * example_eps, rel=1e-6)


@pytest.mark.parametrize("override", [
    dict(num_epochs=-1.0), dict(noise_multiplier=-1.0), dict(delta=1.5),
    dict(delta=-0.5), dict(max_examples_per_user=-1), dict(batch_size=0)])
def test_statement_bad_args(override):
  """compute_dp_sgd_privacy_test.py, the *_bad_args cases: each is a
  ValueError naming the argument."""
  kwargs = dict(STATEMENT_KWARGS, **override)
  with pytest.raises(ValueError, match=next(iter(override))):
    lib.compute_dp_sgd_privacy_statement(**kwargs)


@pytest.mark.parametrize("n,batch_size,epochs,delta,noise_lbd,noise", [
    (60000, 150, 15, 1e-5, 1e-5, 1.3),
    (100000, 100, 30, 1e-7, 1e-6, 1.0),
    (100000000, 1024, 10, 1e-7, 1e-5, 0.1),
])
def test_compute_noise_inverts_compute_dp_sgd_privacy(n, batch_size, epochs,
                                                     delta, noise_lbd, noise):
  """compute_noise_from_budget_test.py's inputs and noise multipliers (its
  target epsilons came from the classic conversion, so the target here is
  compute_dp_sgd_privacy's epsilon at that noise): the noise comes back to
  the search's 1e-6 relative precision, and meets the target."""
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)
    target = _eps(n, batch_size, noise, epochs, delta)[0]
    got = noise_lib.compute_noise(n, batch_size, target, epochs, delta,
                                  noise_lbd)
    assert _eps(n, batch_size, got, epochs, delta)[0] <= target
  assert got == pytest.approx(noise, rel=2e-6)
  assert got >= noise


def test_compute_noise_returns_zero_when_lower_bound_suffices():
  """compute_noise_from_budget_lib: noise_lbd already too large -> 0."""
  with pytest.warns(UserWarning, match="returning 0"):
    assert noise_lib.compute_noise(60000, 256, 10.0, 1, 1e-5, 5.0) == 0


def test_accounting_names_do_not_import_tensorflow():
  code = ("import sys\n"
          "from tf_dp.compat import tensorflow_privacy as tfp\n"
          "tfp.compute_dp_sgd_privacy_statement\n"
          "from tf_dp.compat.tensorflow_privacy.privacy.analysis import "
          "compute_noise_from_budget_lib\n"
          "assert 'tensorflow' not in sys.modules, 'tensorflow imported'\n")
  subprocess.run([sys.executable, "-c", code], check=True)


def _command(*flags):
  return subprocess.run(
      [sys.executable, "-m", "tf_dp.compat.tensorflow_privacy.privacy."
       "analysis.compute_dp_sgd_privacy", *flags], capture_output=True,
      text=True, check=False)


def test_command_at_tf_privacy_module_path_with_its_flags():
  """TF Privacy's README command (--N=60000, batch 256, noise 1.1, 60
  epochs, delta 1e-5): the statement, with its Poisson epsilon 2.597."""
  done = _command("--N=60000", "--batch_size=256", "--noise_multiplier=1.1",
                  "--epochs=60", "--delta=1e-5", "--used_microbatching=false")
  assert done.returncode == 0, done.stderr
  assert done.stdout == lib.compute_dp_sgd_privacy_statement(
      60000, 256, 60.0, 1.1, 1e-5, used_microbatching=False) + "\n"
  assert "Epsilon assuming Poisson sampling (*):                      2.597" in (
      done.stdout)
  missing = _command("--batch_size=256", "--noise_multiplier=1.1",
                     "--epochs=60")
  assert missing.returncode != 0 and "--N" in missing.stderr
