"""TF Privacy's ``compute_dp_sgd_privacy_lib``, computed by tf_dp's accountants.

* ``compute_dp_sgd_privacy`` keeps TF Privacy's numbers: RDP of the
  Poisson-subsampled Gaussian at TF Privacy's orders with the tight
  RDP-to-DP conversion (tf_dp's exact RDP; equal to TF Privacy's published
  values to 1e-9). It assumes Poisson sampling and ignores microbatching, as
  TF Privacy did, and warns about both.
* ``compute_dp_sgd_privacy_statement`` writes TF Privacy's statement with
  tf_dp's RDP (fine order grid) or PLD numbers. User-level epsilon with
  Poisson sampling uses group privacy (Vadhan 2017, Lemma 2.2) for both
  accountants; TF Privacy's PLD variant used a mixture-of-Gaussians PLD
  (Ganesh 2024) that tf_dp does not implement, so tf_dp's PLD user-level
  number is a valid but larger bound.

Pure Python: no TensorFlow is imported.
"""

import enum
import functools
import math
import textwrap
import warnings

from tf_dp.analysis import checks
from tf_dp.analysis import composition
from tf_dp.analysis import conversion
from tf_dp.analysis import dp_sgd_privacy
from tf_dp.analysis import pld
from tf_dp.analysis import rdp

# The orders TF Privacy's compute_dp_sgd_privacy used.
TF_PRIVACY_ORDERS = tuple([1.25, 1.5, 1.75, 2.0, 2.25, 2.5, 3.0, 3.5, 4.0, 4.5]
                          + [float(x) for x in range(5, 64)]
                          + [128.0, 256.0, 512.0])
# tf_dp's default orders plus 1.1, 1.2, ..., 10.9: the statement's RDP grid.
STATEMENT_ORDERS = tuple(sorted(set(rdp.DEFAULT_ORDERS)
                                | {round(1 + x / 10, 1) for x in range(1, 100)}))

_POISSON_WARNING = (
    "compute_dp_sgd_privacy assumes Poisson sampling and one example per "
    "record, as TF Privacy's did. Keras fit(shuffle=True) draws shuffled "
    "batches, which tf_dp accounts as fixed-size sampling (a larger epsilon):"
    " use tf_dp.analysis.compute_dp_sgd_privacy(..., sampling="
    "'fixed_size'), or read the epsilon of the run from "
    "optimizer.ledger with tf_dp.analysis.compute_epsilon_from_ledger.")


class AccountantType(enum.Enum):
  """TF Privacy's accountant choice; both are tf_dp's own accountants."""
  RDP = "RDP"
  PLD = "PLD"


def compute_dp_sgd_privacy(n, batch_size, noise_multiplier, epochs, delta):
  """Epsilon of DP-SGD by RDP, as TF Privacy computed it.

  Privacy contract: ``ceil(epochs * n / batch_size)`` steps of the Gaussian
  mechanism (noise ``noise_multiplier`` times the clip) on Poisson samples
  of rate ``batch_size / n``, add/remove-one neighbours; RDP at
  ``TF_PRIVACY_ORDERS``, tight conversion. Warns (``UserWarning``) that
  this is not the accounting of shuffled Keras batches.

  Args:
    n, batch_size, noise_multiplier, epochs, delta: As TF Privacy's.

  Returns:
    ``(epsilon, optimal_order)``.

  Raises:
    ValueError: on an invalid argument, naming it (e.g. ``batch_size > n``).

  Example:
    >>> compute_dp_sgd_privacy(60000, 256, 1.1, 60, 1e-5)  # (2.597, 8.0)
  """
  warnings.warn(_POISSON_WARNING, UserWarning, stacklevel=2)
  return poisson_rdp_epsilon(n, batch_size, noise_multiplier, epochs, delta)


def poisson_rdp_epsilon(n, batch_size, noise_multiplier, epochs, delta):
  """``compute_dp_sgd_privacy`` without its warning: ``(eps, order)``.

  Below noise multiplier 0.1 (epsilon in the thousands) only the integer
  orders are used: tf_dp's exact RDP at fractional orders refuses such
  noise, and fewer orders only make epsilon larger (still an upper bound).
  """
  orders = TF_PRIVACY_ORDERS
  if noise_multiplier < 0.1:
    orders = tuple(a for a in orders if a == int(a))
  return dp_sgd_privacy.compute_dp_sgd_privacy(
      n, batch_size, noise_multiplier, epochs, delta, sampling="poisson",
      conversion="tight", orders=orders, accountant="rdp")


def _log_expm1(x):
  """log(exp(x) - 1) for x > 0, without overflow."""
  return x + math.log(-math.expm1(-x))


def _example_epsilon(num_epochs, noise_multiplier, delta, used_microbatching,
                     sampling_probability, accountant_type):
  """Example-level epsilon: ``ceil(num_epochs)`` Gaussian releases (each
  example in every one), or ``ceil(num_epochs / q)`` Poisson steps.
  Microbatching doubles the sensitivity (add/remove of one example changes
  a microbatch's mean gradient by up to 2C over its size's share)."""
  sigma = noise_multiplier / 2 if used_microbatching else noise_multiplier
  if sigma == 0:
    return math.inf
  q = 1.0 if sampling_probability is None else sampling_probability
  count = int(math.ceil(num_epochs / q - 1e-9))
  if accountant_type == AccountantType.PLD:
    return float(pld.dp_sgd_pld_epsilon(q, sigma, count, delta))
  curve = rdp.compute_rdp(q, sigma, count, STATEMENT_ORDERS)
  with warnings.catch_warnings():  # Edge orders are expected for q = 1.
    warnings.simplefilter("ignore", RuntimeWarning)
    return conversion.get_privacy_spent(STATEMENT_ORDERS, curve,
                                        target_delta=delta)[0]


def _user_epsilon(num_epochs, noise_multiplier, user_delta, k,
                  used_microbatching, sampling_probability, accountant_type):
  """User-level epsilon for at most ``k`` examples per user."""
  if k == 1 or sampling_probability is None:
    # Without sampling, k examples of a user can all be in one release:
    # sensitivity k times larger, i.e. noise multiplier divided by k.
    return _example_epsilon(num_epochs, noise_multiplier / k, user_delta,
                            used_microbatching, sampling_probability,
                            accountant_type)

  @functools.lru_cache(maxsize=None)
  def example_epsilon_at(example_delta):
    return _example_epsilon(num_epochs, noise_multiplier, example_delta,
                            used_microbatching, sampling_probability,
                            accountant_type)
  return composition.group_privacy_epsilon(example_epsilon_at, k, user_delta)


def _check_statement_args(number_of_examples, batch_size, num_epochs,
                          noise_multiplier, delta, max_examples_per_user,
                          accountant_type):
  checks.check_dataset(number_of_examples, batch_size)
  checks.check_epochs("num_epochs", num_epochs)
  checks.check_noise_multiplier("noise_multiplier", noise_multiplier,
                                allow_zero=True)
  checks.check_delta("delta", delta)
  if max_examples_per_user is not None:
    checks.check_positive_int("max_examples_per_user",
                              max_examples_per_user)
  return AccountantType(getattr(accountant_type, "value", accountant_type))


def _user_level(args, max_examples_per_user, used_microbatching, q, acc):
  """The statement's user-level paragraph and its two epsilons."""
  if max_examples_per_user is None:
    return textwrap.fill(
        "No user-level privacy guarantee is possible without a bound on the "
        "number of examples per user.", width=80), [0.0, 0.0]
  num_epochs, noise_multiplier, delta = args
  user = [_user_epsilon(num_epochs, noise_multiplier, delta,
                        max_examples_per_user, used_microbatching, s, acc)
          for s in (None, q)]
  return textwrap.fill(
      f"User-level DP with add-or-remove-one adjacency at delta = {delta} "
      f"computed using tf_dp's {acc.value} accounting and group privacy "
      "(Vadhan 2017, Lemma 2.2):", width=80) + _epsilon_lines(*user), user


def _format_epsilon(eps):
  return "    inf (**)" if math.isinf(eps) else f"{eps:12.3f}"


def _epsilon_lines(once_per_epoch, poisson):
  return (f"\n    Epsilon with each example occurring once per epoch:  "
          f"{_format_epsilon(once_per_epoch)}"
          f"\n    Epsilon assuming Poisson sampling (*):               "
          f"{_format_epsilon(poisson)}")


def compute_dp_sgd_privacy_statement(
    number_of_examples, batch_size, num_epochs, noise_multiplier, delta,
    used_microbatching=True, max_examples_per_user=None,
    accountant_type=AccountantType.RDP):
  """A text statement of the DP-SGD guarantee, as TF Privacy wrote it.

  Privacy contract: example-level (add/remove one example) epsilon at
  ``delta`` for (a) any data order with each example once per epoch
  (``ceil(num_epochs)`` unamplified Gaussian releases) and (b) Poisson
  sampling at rate ``batch_size / number_of_examples``; with microbatching
  the noise multiplier is halved (sensitivity 2C). With
  ``max_examples_per_user`` also a user-level epsilon by group privacy.

  Args:
    number_of_examples, batch_size, num_epochs, noise_multiplier, delta,
      used_microbatching, max_examples_per_user: As TF Privacy's.
    accountant_type: ``AccountantType.RDP`` (default, as TF Privacy) or
      ``AccountantType.PLD`` (or the strings ``"RDP"``, ``"PLD"``).

  Returns:
    The statement (str), ending with a newline.

  Raises:
    ValueError: on an invalid argument, naming it.
  """
  acc = _check_statement_args(number_of_examples, batch_size, num_epochs,
                              noise_multiplier, delta, max_examples_per_user,
                              accountant_type)
  q = batch_size / number_of_examples
  args = (num_epochs, noise_multiplier, delta)
  paragraph = (
      f"DP-SGD performed over {number_of_examples} examples with {batch_size}"
      f" examples per iteration, noise multiplier {noise_multiplier} for "
      f"{num_epochs} epochs {'with' if used_microbatching else 'without'} "
      "microbatching")
  paragraph += (", and no bound on number of examples per user."
                if max_examples_per_user is None else
                f", and at most {max_examples_per_user} examples per user.")
  paragraphs = [paragraph,
                "This privacy guarantee protects the release of all model "
                "checkpoints in addition to the final model."]
  paragraphs = [textwrap.fill(p, width=80) for p in paragraphs]
  example = [_example_epsilon(*args, used_microbatching, s, acc)
             for s in (None, q)]
  paragraphs.append(textwrap.fill(
      f"Example-level DP with add-or-remove-one adjacency at delta = {delta} "
      f"computed with tf_dp's {acc.value} accounting:", width=80)
                    + _epsilon_lines(*example))
  user_paragraph, user = _user_level(args, max_examples_per_user,
                                     used_microbatching, q, acc)
  paragraphs.append(user_paragraph)
  paragraphs.append(textwrap.fill(
      "(*) A guarantee only if every batch was drawn by Poisson sampling "
      "(e.g. tf_dp.data.poisson_sampled_batches). Shuffled batches are not "
      "Poisson samples, and their epsilon can be larger than this value "
      "(Chua et al. 2024); the once-per-epoch value holds for any data "
      "order.", width=80))
  if any(math.isinf(e) for e in user):
    paragraphs.append(textwrap.fill(
        "(**) A finite example-level epsilon implies a finite user-level "
        "epsilon, but group privacy is not exact: its upper bound on the "
        "user-level epsilon can still be infinite.", width=80))
  return "\n\n".join(paragraphs) + "\n"


# TF Privacy's private helpers of the statement, under its names and
# signatures (its tests call them).
_logexpm1 = _log_expm1


def _compute_dp_sgd_example_privacy(num_epochs, noise_multiplier,
                                    example_delta, used_microbatching=True,
                                    poisson_subsampling_probability=None,
                                    accountant_type=AccountantType.RDP):
  """The statement's example-level epsilon (see
  ``compute_dp_sgd_privacy_statement``); ``poisson_subsampling_probability``
  None for each example once per epoch."""
  checks.check_epochs("num_epochs", num_epochs)
  checks.check_noise_multiplier("noise_multiplier", noise_multiplier,
                                allow_zero=True)
  checks.check_delta("example_delta", example_delta, allow_zero=True)
  return _example_epsilon(num_epochs, noise_multiplier, example_delta,
                          used_microbatching, poisson_subsampling_probability,
                          AccountantType(getattr(accountant_type, "value",
                                                 accountant_type)))


def _compute_dp_sgd_user_privacy(num_epochs, noise_multiplier, user_delta,
                                 max_examples_per_user,
                                 used_microbatching=True,
                                 poisson_subsampling_probability=None,
                                 accountant_type=AccountantType.RDP):
  """The statement's user-level epsilon for at most
  ``max_examples_per_user`` examples per user (group privacy)."""
  checks.check_epochs("num_epochs", num_epochs)
  checks.check_noise_multiplier("noise_multiplier", noise_multiplier,
                                allow_zero=True)
  checks.check_delta("user_delta", user_delta, allow_zero=True)
  checks.check_positive_int("max_examples_per_user", max_examples_per_user)
  return _user_epsilon(num_epochs, noise_multiplier, user_delta,
                       max_examples_per_user, used_microbatching,
                       poisson_subsampling_probability,
                       AccountantType(getattr(accountant_type, "value",
                                              accountant_type)))
