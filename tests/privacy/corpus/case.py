"""What a corpus model is: a ``Case`` (builder, data, loss, optimizer,
flavours), the registry the ``@case`` decorator fills, and the data
generators the models share.

A builder takes the Keras module of one flavour (``keras`` 3, or Keras 2:
``tf_keras`` on TF 2.21, ``tf.keras`` on TF 2.15) and returns the model as
its author writes it, uncompiled and not yet private. The data generator
takes a NumPy generator and a number of examples and returns ``(x, y)``
(or ``(x, y, sample_weight)``):
random but not degenerate (inputs that vary, labels of several classes),
so every trainable weight has a gradient.
"""

import dataclasses
from typing import Any, Callable, Dict, List, Tuple

import numpy as np

KERAS3, KERAS2 = "keras3", "keras2"
BOTH = (KERAS3, KERAS2)

Data = Callable[[np.random.Generator, int], Tuple[Any, ...]]


@dataclasses.dataclass(frozen=True)
class Case:
  """One corpus model.

  Attributes:
    name: Unique name (letters, digits, underscores: it is part of the test
      id, whose dash-separated parts are the name, flavour and path).
    build: ``build(K)``: the model, uncompiled, for Keras module ``K``.
    data: ``data(rng, n)``: ``(x, y)`` or ``(x, y, sample_weight)`` of
      ``n`` examples.
    loss: ``loss(K)``: what ``compile(loss=...)`` gets.
    optimizer: ``optimizer(K)``: the Keras optimizer the DPOptimizer wraps.
    flavours: The flavours the model exists in (``"keras3"``, ``"keras2"``).
    batch_size: Examples per batch; the data has two batches.
    requires: Modules the builder imports (the case is skipped without).
    origin: Where the model's shape comes from (an example or tutorial).
    slow: Its two steps take more than about 10 s of CPU on a path (a
      keras.applications network, recurrent layers, a second KerasHub
      model of a kind the fast set already has): marked slow.
    mixes_examples: Why one example's output depends on the others (an
      ordinary model with that defect, which DP training must refuse);
      empty for the models that must train.
    mixes_on: The flavours where it mixes them (default: every one).
  """
  name: str
  build: Callable[[Any], Any]
  data: Data
  loss: Callable[[Any], Any]
  optimizer: Callable[[Any], Any]
  flavours: Tuple[str, ...] = BOTH
  batch_size: int = 8
  requires: Tuple[str, ...] = ()
  origin: str = ""
  slow: bool = False
  mixes_examples: str = ""
  mixes_on: Tuple[str, ...] = BOTH

  def mixes_examples_in(self, flavour: str) -> bool:
    return bool(self.mixes_examples) and flavour in self.mixes_on

  @property
  def examples(self) -> int:
    return 2 * self.batch_size


REGISTRY: Dict[str, Case] = {}


def adam(K):
  return K.optimizers.Adam(1e-3)


def sgd(K):
  return K.optimizers.SGD(0.05)


def sparse_logits(K):
  return K.losses.SparseCategoricalCrossentropy(from_logits=True)


def binary_logits(K):
  return K.losses.BinaryCrossentropy(from_logits=True)


def named(loss_name):
  """A loss given by name, as ``compile(loss="mse")`` takes it."""
  return lambda K: loss_name


def case(data: Data, loss: Callable[[Any], Any] = sparse_logits,
         optimizer: Callable[[Any], Any] = adam, flavours=BOTH,
         batch_size: int = 8, requires=(), origin: str = "", slow=False,
         mixes_examples: str = "", mixes_on=BOTH, name=None):
  """Registers the decorated builder as a corpus ``Case`` named after it."""
  def register(build):
    key = name or build.__name__
    if key in REGISTRY:
      raise ValueError(f"Two corpus models are named {key!r}.")
    if not key.replace("_", "").isalnum():
      raise ValueError(f"Corpus model name {key!r}: use letters, digits "
                       f"and underscores only.")
    REGISTRY[key] = Case(key, build, data, loss, optimizer, tuple(flavours),
                         batch_size, tuple(requires), origin, slow,
                         mixes_examples, tuple(mixes_on))
    return build
  return register


def is_keras3(K) -> bool:
  return hasattr(K, "ops")


def random_lora_factors(model, seed=7):
  """Gives the LoRA ``b`` factors of ``model`` random values (scale 0.1).

  LoRA's b starts at zero, so a's gradient is zero at the first step: a
  fine-tuning run that already moved b exercises both factors.
  """
  rng = np.random.default_rng(seed)
  for v in model.trainable_variables:
    if "lora_kernel_b" in v.path or "lora_embeddings_b" in v.path:
      v.assign(0.1 * rng.normal(size=v.shape).astype("float32"))


# --- Data. ---


def classes(rng, n, count):
  """Integer labels of ``count`` classes, each class present when n
  allows it (a shuffled cycle 0, 1, ..., count - 1, 0, ...)."""
  return rng.permutation(np.arange(n) % count).astype("int32")


def images(shape, num_classes=10, one_hot=False, scale=1.0) -> Data:
  """Images uniform in [0, scale) and ``num_classes`` labels (one-hot
  float32 with ``one_hot``; float32 0/1 for ``num_classes=1``)."""
  def data(rng, n):
    x = (scale * rng.uniform(size=(n,) + tuple(shape))).astype("float32")
    return x, labels(rng, n, num_classes, one_hot)
  return data


def labels(rng, n, num_classes, one_hot=False):
  if num_classes == 1:
    return classes(rng, n, 2).astype("float32")
  y = classes(rng, n, num_classes)
  return np.eye(num_classes, dtype="float32")[y] if one_hot else y


def tokens(length, vocabulary, num_classes=2, padded=False) -> Data:
  """Token ids in [1, vocabulary) (0 is padding: with ``padded`` each
  sequence keeps 3 to ``length`` tokens and ends in zeros) and labels
  (float32 0/1 for ``num_classes=1``)."""
  def data(rng, n):
    return (token_ids(rng, n, length, vocabulary, padded),
            labels(rng, n, num_classes))
  return data


def token_ids(rng, n, length, vocabulary, padded=False):
  x = rng.integers(1, vocabulary, size=(n, length)).astype("int32")
  if padded:
    kept = rng.integers(3, length + 1, size=(n, 1))
    x *= (np.arange(length)[None, :] < kept).astype("int32")
  return x


def series(steps, features, target) -> Data:
  """Smooth random series ``[n, steps, features]`` (random walks) and a
  target: ``"next"`` (the next value of feature 0, ``[n, 1]``), ``"each"``
  (feature 0 one step ahead at every step, ``[n, steps, 1]``) or an int
  (that many classes)."""
  def data(rng, n):
    walk = np.cumsum(rng.normal(size=(n, steps + 1, features)), axis=1)
    walk = (0.3 * walk).astype("float32")
    x = walk[:, :steps]
    if target == "next":
      return x, walk[:, steps, :1]
    if target == "each":
      return x, walk[:, 1:, :1]
    return x, classes(rng, n, target)
  return data


def registered() -> List[Case]:
  return list(REGISTRY.values())
