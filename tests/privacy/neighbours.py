"""Neighbour runs: train one lot on D and on D' (one example changed or
removed) with noise 0 and SGD(learning_rate=1), and measure how far the
clipped sum moved.

With no noise and a learning rate of 1 the update of one lot is the clipped
sum divided by the lot's denominator, so ``denominator * (update(D) -
update(D'))`` is the change of the clipped sum. DP-SGD's promise: at most
2C when one example is replaced (fixed-size lots), at most C when one is
removed (Poisson lots).
"""

import dataclasses
import warnings

import numpy as np
import pytest
import tensorflow as tf

import tf_dp
from tests.privacy import catalogue

# Clip norms: 0.01 clips every record; 1.0 leaves some records unclipped,
# so that a record whose gradient depends on another example's label moves
# in magnitude as well as direction.
CLIPS = (0.01, 1.0)
BATCH = 4
POPULATION = 1000
TOLERANCE = 1e-4  # float32 rounding of sums of a few clipped gradients.


@dataclasses.dataclass(frozen=True)
class Case:
  model: str
  loss: str            # a registry name, or "class:<LossClass>"
  config: int          # index into catalogue.configs(kind, ...)
  weighting: str       # none | sample_weight | class_weight | loss_weights
  microbatches: object  # None or 2
  accumulation: int    # batches per lot
  sampling: str        # shuffled | fixed_size | poisson
  method: str          # fast | vectorized
  clip: float = 1.0

  def kind(self):
    return catalogue.KINDS.get(self.loss) or catalogue.CLASSES[self.loss[6:]]

  def label(self):
    return "-".join(str(v) for v in dataclasses.astuple(self))


MODELS = ("dense", "conv", "embedding", "rnn", "lstm", "gru", "layernorm",
          "shared", "nested", "two_outputs")


def recorded_sampling(case):
  """The sampling a case's optimizer declares: a "shuffled" case of several
  batches takes them in order (shuffle=False, so that D and D' make the same
  lot and microbatches), which is declared as "fixed_order" (fit refuses a
  fixed order under "shuffled"); the DP step is the same."""
  if case.sampling == "shuffled" and case.accumulation > 1:
    return "fixed_order"
  return case.sampling

def _inputs(K, model):
  if model == "conv":
    return K.Input((6, 6, 1))
  if model == "embedding":
    return K.Input((5,), dtype="int32")
  if model in ("rnn", "lstm", "gru"):
    return K.Input((4, 3))
  return K.Input((4,))


def _features(K, flavor, model, inputs):
  init = K.initializers.GlorotUniform(seed=1)
  dense = lambda u, **kw: K.layers.Dense(u, kernel_initializer=init, **kw)
  if model == "conv":
    h = K.layers.Conv2D(2, 3, activation="tanh", kernel_initializer=init)(
        inputs)
    return K.layers.Flatten()(h)
  if model == "embedding":
    h = K.layers.Embedding(10, 3, embeddings_initializer=init)(inputs)
    return K.layers.Flatten()(h)
  # tf-keras's LSTM/GRU kernels only vectorize when unrolled.
  unroll = {"unroll": True} if flavor == "keras2" else {}
  if model == "rnn":
    return K.layers.SimpleRNN(4, kernel_initializer=init)(inputs)
  if model == "lstm":
    return K.layers.LSTM(3, kernel_initializer=init, **unroll)(inputs)
  if model == "gru":
    return K.layers.GRU(3, kernel_initializer=init, **unroll)(inputs)
  if model == "layernorm":
    return K.layers.LayerNormalization()(dense(5)(inputs))
  if model == "shared":
    shared = dense(4, activation="tanh")
    return shared(shared(inputs))
  if model == "nested":
    inner = K.Sequential([K.Input((4,)), dense(5, activation="tanh")])
    return inner(inputs)
  return dense(5, activation="tanh")(inputs)


def build(K, flavor, case):
  kind = case.kind()
  units, _ = catalogue.configs(kind, BATCH)[case.config]
  inputs = _inputs(K, case.model)
  h = _features(K, flavor, case.model, inputs)
  init = K.initializers.GlorotUniform(seed=2)
  head = lambda name: K.layers.Dense(
      units, activation=catalogue.output_activation(kind),
      kernel_initializer=init, name=name)(h)
  outputs = ([head("out_a"), head("out_b")] if case.model == "two_outputs"
             else head("out"))
  return K.Model(inputs, outputs)


def data(case, n, seed):
  rng = np.random.default_rng(seed)
  if case.model == "conv":
    x = rng.normal(size=(n, 6, 6, 1))
  elif case.model == "embedding":
    x = rng.integers(0, 10, size=(n, 5))
  elif case.model in ("rnn", "lstm", "gru"):
    x = rng.normal(size=(n, 4, 3))
  else:
    x = rng.normal(size=(n, 4))
  x = x.astype("int32" if case.model == "embedding" else "float32")
  kind = case.kind()
  _, shape = catalogue.configs(kind, n)[case.config]
  y = catalogue.labels(kind, shape, rng)
  if case.model == "two_outputs":
    y = [y, catalogue.labels(kind, shape, rng)]
  return x, y


def _loss(K, spec):
  return getattr(K.losses, spec[6:])() if spec.startswith("class:") else spec


def lot_update(K, flavor, case, x, y, weights, initial):
  """Weights before minus after one lot, flattened; and the ledger."""
  model = build(K, flavor, case)
  model.set_weights(initial)
  model = tf_dp.keras.make_private(model)
  compile_kw = {}
  loss = _loss(K, case.loss)
  if case.model == "two_outputs":
    loss = [loss, _loss(K, case.loss)]
  if case.weighting == "loss_weights":
    compile_kw["loss_weights"] = ([3.0, 0.5] if case.model == "two_outputs"
                                  else [3.0])
  dp_kw = dict(sampling=recorded_sampling(case))
  if case.sampling == "poisson":
    dp_kw = dict(sampling="poisson",
                 sampling_probability=BATCH * case.accumulation / POPULATION)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)  # noise_multiplier=0.
    optimizer = tf_dp.DPOptimizer(
        K.optimizers.SGD(1.0), l2_norm_clip=case.clip, noise_multiplier=0.0,
        population_size=POPULATION, num_microbatches=case.microbatches,
        gradient_accumulation_steps=case.accumulation,
        per_example_method=case.method, **dp_kw)
  model.compile(optimizer=optimizer, loss=loss, **compile_kw)
  before = np.concatenate([v.numpy().ravel()
                           for v in model.trainable_variables])
  fit_kw = dict(epochs=1, verbose=0)
  if case.weighting == "class_weight":
    fit_kw["class_weight"] = {0: 0.5, 1: 2.0, 2: 1.5}
  if case.sampling == "shuffled":
    if case.weighting == "sample_weight":
      fit_kw["sample_weight"] = weights
    model.fit(x, y, batch_size=BATCH, shuffle=False, **fit_kw)
  else:
    # Lots of a sampler arrive as a dataset (fit refuses arrays under
    # fixed-size and Poisson sampling): here the lot drawn is D itself.
    y_ds = tuple(y) if isinstance(y, list) else y
    with_weights = case.sampling == "poisson" or (
        case.weighting == "sample_weight")
    ds = tf.data.Dataset.from_tensor_slices(
        (x, y_ds, weights) if with_weights else (x, y_ds))
    model.fit(tf_dp.data.declare_sampling(
        ds.batch(BATCH), case.sampling, dp_kw.get("sampling_probability"),
        batches_per_lot=case.accumulation), **fit_kw)
  after = np.concatenate([v.numpy().ravel()
                          for v in model.trainable_variables])
  return before - after, model.optimizer.ledger


def denominator(case):
  if case.sampling == "poisson":
    return BATCH * case.accumulation  # q * n
  records = BATCH // (case.microbatches or 1)
  return records * case.accumulation


def check(K, flavor, case, seed):
  """Runs D and its neighbour; returns (change of the clipped sum, bound)."""
  n = BATCH * case.accumulation
  x, y = data(case, n, seed)
  weights = np.ones(n, "float32")
  if case.weighting == "sample_weight":
    weights = np.random.default_rng(seed + 1).uniform(0.5, 2.0, n).astype(
        "float32")
  initial = build(K, flavor, case).get_weights()
  j = int(np.random.default_rng(seed + 2).integers(n))
  x2, y2 = data(case, n, seed + 100)
  if case.kind() == "regression":  # A far label: a large change of loss.
    y2 = [t + 50.0 for t in y2] if isinstance(y2, list) else y2 + 50.0
  xn = np.array(x)
  weights_n = np.array(weights)
  yn = [np.array(t) for t in y] if isinstance(y, list) else np.array(y)
  if case.sampling == "poisson":
    weights_n[j] = 0.0  # Remove example j.
    bound = case.clip
  else:
    xn[j] = x2[j]
    if isinstance(y, list):
      for t, t2 in zip(yn, y2):
        t[j] = t2[j]
    else:
      yn[j] = y2[j]
    bound = 2 * case.clip
  update, ledger = lot_update(K, flavor, case, x, y, weights, initial)
  update_n, _ = lot_update(K, flavor, case, xn, yn, weights_n, initial)
  change = denominator(case) * float(np.linalg.norm(update - update_n))
  return change, bound, update, ledger


def assert_bound(K, flavor, case, seed=3):
  """Asserts DP-SGD's promise for ``case`` (neighbours from ``seed``) and
  that the ledger recorded one sample of the lot drawn."""
  change, bound, update, ledger = check(K, flavor, case, seed=seed)
  assert change <= bound * (1 + TOLERANCE), (
      f"{case}: one example moved the clipped sum by {change / bound:.3f} "
      f"times its bound")
  assert update.any(), "the lot was not applied"
  data = ledger.to_dict(ledger_format="tf_dp.privacy_ledger/1")
  # A fixed-order lot that leaves the pass unfilled is followed by the
  # pass's closing sample, which releases nothing (no query).
  released = [s for s in data["samples"] if s["sum_queries"]]
  assert len(released) == 1, data["samples"]
  assert len(data["samples"]) == 1 + (recorded_sampling(case) == "fixed_order")
  sample = released[0]
  lot = BATCH * case.accumulation
  assert sample["sampling"] == recorded_sampling(case)
  assert sample["sampling_probability"] == pytest.approx(lot / POPULATION)
  if case.microbatches:
    assert sample["examples_per_record"] == BATCH // case.microbatches
