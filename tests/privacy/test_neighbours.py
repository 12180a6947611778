"""The neighbour test, fixed cases: one example moves the clipped sum by <=
its bound.

Every case trains one lot with noise 0 on a dataset D and on a neighbour D'
(one example replaced for fixed-size lots, removed for Poisson lots) from
the same weights, and asserts that the clipped sum moved by at most 2C
(replace) or C (remove), and that the ledger recorded one sample of what
was drawn (neighbours.assert_bound). The cases here are the ones that once
broke the promise, each at the clip norm 0.01, which clips every record, so
that the bound is reached by one example's records alone and anything
another example adds to them exceeds it. test_neighbours_sampled.py draws
cases from the whole product of model, loss, weighting, microbatches,
accumulation, sampling, per-example path and clip norm (0.01 and 1.0).
"""

import dataclasses

import pytest

from tests.keras import helpers
from tests.privacy import catalogue
from tests.privacy import neighbours
from tests.privacy.neighbours import Case

# Cases that broke the promise before (string losses with labels (B,) and an
# output (B, 1) on the fast path; loss_weights; accumulation lots).
FIXED = [
    Case("dense", "mse", 0, "none", None, 1, "shuffled", "fast"),
    Case("dense", "binary_crossentropy", 0, "none", None, 1, "shuffled",
         "fast"),
    Case("dense", "hinge", 0, "none", None, 1, "shuffled", "fast"),
    Case("dense", "poisson", 0, "none", None, 1, "shuffled", "fast"),
    Case("dense", "sparse_categorical_crossentropy", 0, "loss_weights", None,
         1, "shuffled", "fast"),
    Case("conv", "kld", 0, "sample_weight", None, 2, "shuffled", "fast"),
    Case("dense", "mse", 1, "none", None, 2, "poisson", "fast"),
    Case("two_outputs", "mse", 0, "loss_weights", None, 1, "shuffled",
         "vectorized"),
    # Found by the sampled matrix: per-output sample weights (as Keras passes
    # them for two outputs) on the vectorized path.
    Case("two_outputs", "mse", 0, "sample_weight", None, 1, "shuffled",
         "vectorized"),
]
# The binding clip norm: every record is clipped.
CLIP = min(neighbours.CLIPS)


def _cases():
  out = []
  for param in helpers.keras_modules():
    K, flavor = param.values[0], param.id
    names, _ = catalogue.registry_names(K)
    for case in FIXED:
      if case.loss in names:
        case = dataclasses.replace(case, clip=CLIP)
        out.append(pytest.param(K, flavor, case,
                                id=f"{flavor}-fixed-{case.label()}"))
  return out


@pytest.mark.parametrize("K,flavor,case", _cases())
def test_one_example_moves_the_clipped_sum_by_at_most_its_bound(K, flavor,
                                                               case):
  neighbours.assert_bound(K, flavor, case)
