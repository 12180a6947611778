"""Trains a corpus model privately for two steps, as a user would:
``make_private``, ``compile`` with a ``DPOptimizer``, ``fit``."""

import dataclasses
from typing import Any, List, Tuple
import warnings

import numpy as np

import tf_dp
from tests.privacy.corpus import case as corpus

PATHS = ("auto", "vectorized")
L2_NORM_CLIP, NOISE_MULTIPLIER = 1.0, 1.1
SEED = 0


@dataclasses.dataclass(frozen=True)
class Trained:
  """The trainable weights (name, value) when fit began and after it."""
  before: List[Tuple[str, np.ndarray]]
  after: List[Tuple[str, np.ndarray]]


def _named_weights(model) -> List[Tuple[str, np.ndarray]]:
  return [(getattr(v, "path", None) or v.name, np.array(v.numpy()))
          for v in model.trainable_variables]


def train_two_steps(case: corpus.Case, K: Any, path: str) -> Trained:
  """Builds ``case``'s model for Keras module ``K`` and trains it privately
  on two batches (clip 1, noise multiplier 1.1, population = the examples)
  with ``per_example_method=path``; any refusal propagates."""
  K.utils.set_random_seed(SEED)
  model = case.build(K)
  data = case.data(np.random.default_rng(SEED), case.examples)
  x, y = data[:2]
  sample_weight = data[2] if len(data) > 2 else None
  model = tf_dp.keras.make_private(model)
  model.compile(
      optimizer=tf_dp.DPOptimizer(
          case.optimizer(K), l2_norm_clip=L2_NORM_CLIP,
          noise_multiplier=NOISE_MULTIPLIER, population_size=case.examples,
          per_example_method=path),
      loss=case.loss(K))
  weights = {}
  # Subclassed models are built by fit: the weights are read when it
  # begins.
  record = K.callbacks.LambdaCallback(
      on_train_begin=lambda logs: weights.setdefault(
          "before", _named_weights(model)))
  with warnings.catch_warnings():
    # The global seed set above makes fit's shuffle reproducible: a test's
    # wish, which tf_dp warns users against.
    warnings.filterwarnings("ignore", "fit shuffles the arrays",
                            UserWarning)
    model.fit(x, y, sample_weight=sample_weight, batch_size=case.batch_size,
              epochs=1, shuffle=True, verbose=0, callbacks=[record])
  return Trained(weights["before"], _named_weights(model))


def flavour_modules():
  """``{flavour: Keras module}`` of the flavours installed here."""
  from tf_dp.keras import backend  # pylint: disable=g-import-not-at-top
  modules = {corpus.KERAS3: backend.keras3_module(),
             corpus.KERAS2: backend.keras2_module()}
  return {name: module for name, module in modules.items()
          if module is not None}
