"""A corpus of ordinary Keras models, written as their authors write them,
that DP training must accept (tests/privacy/test_corpus.py trains each).

One registry (``case.REGISTRY``) of ``case.Case``: a builder, its data, loss
and optimizer, and the flavours it exists in. To add a model, write its
builder in the module of its field with the ``@case.case(...)`` decorator
(or in a new module imported below).
"""

# Importing a module registers its models.
from tests.privacy.corpus import applications  # pylint: disable=unused-import
from tests.privacy.corpus import custom  # pylint: disable=unused-import
from tests.privacy.corpus import hub  # pylint: disable=unused-import
from tests.privacy.corpus import normalization  # pylint: disable=unused-import
from tests.privacy.corpus import structured  # pylint: disable=unused-import
from tests.privacy.corpus import text  # pylint: disable=unused-import
from tests.privacy.corpus import time_series  # pylint: disable=unused-import
from tests.privacy.corpus import vision  # pylint: disable=unused-import
from tests.privacy.corpus.case import Case
from tests.privacy.corpus.case import KERAS2
from tests.privacy.corpus.case import KERAS3
from tests.privacy.corpus.case import REGISTRY

CASES = tuple(REGISTRY.values())
