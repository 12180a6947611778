"""How the records of a lot are drawn, and what one record protects: the
one definition of the sampling kinds and of the privacy units.

``Sampling`` and ``PrivacyUnit`` are ``str`` enums: each member equals its
string value (``Sampling.POISSON == "poisson"``), so the string works
wherever a member does, in arguments, the ledger JSON and Keras configs.
Pure Python.
"""

import enum
from typing import Any, Iterable, Optional


class _Choice(str, enum.Enum):
  """A ``str`` enum whose members print, format and compare as their
  strings, checked with ``check``. The declaration order of a subclass's
  members is the code that ledger buffers and checkpoints store
  (``tf_dp.analysis.ledger_schema.sampling_code``): never reorder, only
  append."""

  def __str__(self) -> str:
    return self.value

  def __format__(self, format_spec: str) -> str:
    return format(self.value, format_spec)

  def __repr__(self) -> str:
    return repr(self.value)

  @classmethod
  def check(cls, name: str, value: object, allowed: Optional[Iterable[Any]]
            = None) -> Any:
    """``value`` (a member or its string) as a member of ``allowed``.

    Args:
      name: The argument's name, for the error message.
      value: What the caller passed.
      allowed: The members accepted here (default: all).

    Raises:
      ValueError: naming ``name``, the members allowed and ``value``.
    """
    kinds = tuple(cls) if allowed is None else tuple(allowed)
    if isinstance(value, str) and value in kinds:
      return cls(value)
    raise ValueError(f"{name} must be one of {kinds}; got {value!r}.")


class Sampling(_Choice):
  """A sampling kind, what the accountant assumes about every lot.

  * ``POISSON`` (``"poisson"``): each record is in the lot independently
    with probability q; add/remove-one neighbours.
  * ``FIXED_SIZE`` (``"fixed_size"``): a uniformly random subset of fixed
    size per lot, drawn without replacement; replace-one neighbours.
  * ``SHUFFLED`` (``"shuffled"``): the batches of a shuffled pass over the
    data, as Keras ``fit(shuffle=True)`` draws them; accounted as
    ``FIXED_SIZE``, the conventional approximation and not a proven
    guarantee (Chua et al. 2024, "How Private are DP-SGD Implementations?").
    Only an order shown random counts as shuffled: ``fit`` refuses a fixed
    order under it (``tf_dp.keras.fit_order``).
  * ``FIXED_ORDER`` (``"fixed_order"``): the batches of passes over the data
    in an order that may be known (``fit(..., shuffle=False)``, a
    ``tf.data`` pipeline without a shuffle): no lot is random, so nothing
    is amplified. Each example is in exactly one lot of a pass, so a pass
    is one Gaussian mechanism per example (parallel composition) and the
    passes compose; replace-one neighbours, sensitivity 2C
    (``tf_dp.analysis.fixed_order``).
  """
  POISSON = "poisson"
  FIXED_SIZE = "fixed_size"
  SHUFFLED = "shuffled"
  FIXED_ORDER = "fixed_order"

  @property
  def accounted_as(self) -> "Sampling":
    """The kind the accountants compose: ``SHUFFLED`` as ``FIXED_SIZE``
    (``FIXED_ORDER`` lots are grouped into passes first:
    ``tf_dp.analysis.fixed_order``)."""
    return Sampling.FIXED_SIZE if self is Sampling.SHUFFLED else self


# The kinds an accountant composes directly (SHUFFLED is accounted as
# FIXED_SIZE; FIXED_ORDER as unsampled FIXED_SIZE passes).
ACCOUNTED = (Sampling.POISSON, Sampling.FIXED_SIZE)


class PrivacyUnit(_Choice):
  """What one record of a lot is: the unit that the guarantee protects.

  * ``EXAMPLE`` (``"example"``, the default): a record is one example (or
    one microbatch); epsilon is per example: adding or removing (or
    replacing) one example.
  * ``USER`` (``"user"``): a record is one user, the sum of the gradients
    of that user's examples in the lot (at most ``max_examples_per_user``
    of them), clipped as one; lots are drawn over users
    (``tf_dp.data.poisson_sampled_users``, ``fixed_size_sampled_users``),
    the ledger's n is the number of users and q the probability that a
    user is in a lot; epsilon is per user: adding or removing (or
    replacing) one user with all their examples.
  """
  EXAMPLE = "example"
  USER = "user"

