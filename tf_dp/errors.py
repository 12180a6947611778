"""The errors tf_dp raises when it refuses to go on, by what went wrong.

Each subclasses ``ValueError``, so ``except ValueError`` catches them all;
catch a subclass to handle one case. Bad arguments (a negative clip, an
unknown option) are plain ``ValueError`` / ``TypeError`` naming the
argument. Pure Python.
"""


class PrivacyError(ValueError):
  """Going on would break the privacy guarantee or its accounting."""

  # Raised while TensorFlow traces a step (a Keras train function, a
  # tf.function), the error reaches the caller as itself, so that
  # ``except ValueError`` and ``except PrivacyError`` still catch it:
  # AutoGraph would otherwise replace a subclass it does not know with its
  # StagingError.
  ag_pass_through = True


class UnsupportedModelError(PrivacyError):
  """A model part whose per-example gradients cannot be clipped (it mixes
  examples, e.g. batch normalization, or keeps a statistic of the data);
  the message names the part and the replacement."""


class SamplingMismatchError(PrivacyError):
  """The lots are not drawn as the ledger or the configuration records
  (another sampling kind, population size or declaration)."""


class LedgerFormatError(PrivacyError):
  """A ledger export or buffer is not valid; the message names the first
  bad field, its value and what is allowed."""


class IncompleteLedgerError(PrivacyError):
  """The ledger did not record every lot (it was full): epsilon cannot be
  computed from it."""


class RecordStructureError(ValueError, TypeError):
  """A record (or state) whose nest differs from the one a query was built
  for: a ``ValueError``, and a ``TypeError`` as ``tf.nest`` raises for a
  sequence of another type (a tuple for a list)."""

  ag_pass_through = True  # As PrivacyError's: keeps its type when traced.
