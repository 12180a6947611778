"""The sampled neighbour matrix: one example moves the clipped sum by <= its
bound, for cases drawn from the product of model, loss (every name and class
of the registry, labels with and without a trailing 1), weighting,
microbatches, accumulation, sampling, per-example path and clip norm.

A run takes a sample of the product (TF_DP_PRIVACY_SEED: a number, or
"random"; TF_DP_PRIVACY_CASES; the seed is in each case's id;
TF_DP_PRIVACY_RECURRENT recurrent models per Keras flavour). The check
itself (neighbours.check, neighbours.assert_bound) is
the one of the fixed cases in test_neighbours.py.

Marked slow (CI runs it on TF 2.21 only): its cases train the same tf_dp code
on TF 2.15's Keras 2 as on TF 2.21's tf-keras (the keras2 flavour here);
TF 2.15's Keras 2 runs its share of the fixed cases of test_neighbours.py.
"""

import itertools
import os
import random

import pytest

from tests.keras import helpers
from tests.privacy import catalogue
from tests.privacy import neighbours
from tests.privacy.neighbours import Case

pytestmark = pytest.mark.slow

# A fixed default keeps CI reproducible; set TF_DP_PRIVACY_SEED=random (or a
# number) to explore other parts of the product.
_SEED_SETTING = os.environ.get("TF_DP_PRIVACY_SEED", "20261122")
SEED = (random.SystemRandom().randrange(10 ** 6) if _SEED_SETTING == "random"
        else int(_SEED_SETTING))
CASES_PER_FLAVOUR = int(os.environ.get("TF_DP_PRIVACY_CASES", "6"))
# A recurrent case costs ten to thirty feed-forward ones (tf.vectorized_map
# traced through the layer's while loop: 50-190 s on a loaded 2-core
# machine), so a run samples TF_DP_PRIVACY_RECURRENT of them per flavour
# (default 0: recurrent steps are checked against the per-example loop in
# tests/keras/test_dp_training.py), the rest feed-forward.
RECURRENT = ("rnn", "lstm", "gru")
RECURRENT_PER_FLAVOUR = int(os.environ.get("TF_DP_PRIVACY_RECURRENT", "0"))


def _valid(case, names):
  kind = case.kind()
  if case.loss not in names:
    return False
  if case.config >= len(catalogue.configs(kind, neighbours.BATCH)):
    return False
  if case.sampling == "poisson" and (
      case.microbatches or case.weighting in ("sample_weight",
                                              "class_weight")):
    return False  # Poisson lots carry presence weights, no microbatches.
  if case.weighting == "class_weight" and (
      kind not in ("sparse", "binary") or case.model == "two_outputs"):
    return False
  if case.loss[6:] in catalogue.BATCH_LEVEL or case.loss in (
      catalogue.BATCH_LEVEL):
    return case.model != "two_outputs"
  return True


def _sample(K, flavor):
  names, classes = catalogue.registry_names(K)
  specs = names + [f"class:{c}" for c in classes]
  space = itertools.product(
      neighbours.MODELS, specs, range(3),
      ("none", "sample_weight", "class_weight", "loss_weights"),
      (None, 2), (1, 2), ("shuffled", "fixed_size", "poisson"),
      ("fast", "vectorized"),
      neighbours.CLIPS)
  valid = [c for c in (Case(*v) for v in space) if _valid(c, specs)]
  rng = random.Random(f"{SEED}-{flavor}")
  recurrent = [c for c in valid if c.model in RECURRENT]
  others = [c for c in valid if c.model not in RECURRENT]
  count = min(RECURRENT_PER_FLAVOUR, CASES_PER_FLAVOUR, len(recurrent))
  return rng.sample(recurrent, count) + rng.sample(
      others, min(CASES_PER_FLAVOUR - count, len(others)))


def _cases():
  out = []
  for param in helpers.keras_modules():
    K, flavor = param.values[0], param.id
    for case in _sample(K, flavor):
      out.append(pytest.param(K, flavor, case,
                              id=f"{flavor}-seed{SEED}-{case.label()}"))
  return out


@pytest.mark.parametrize("K,flavor,case", _cases())
def test_one_example_moves_the_clipped_sum_by_at_most_its_bound(K, flavor,
                                                               case):
  neighbours.assert_bound(K, flavor, case)
