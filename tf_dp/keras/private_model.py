"""``make_private``: give a Keras model a DP-SGD ``train_step``.

Keras 3 never shows an optimizer per-example losses with a tape, and Keras 2
only through an O(batch^2) jacobian, so the DP step must own the training
step. ``make_private(model)`` validates the model and replaces its
``train_step`` (on the instance, for Sequential, Functional and subclassed
models alike) with one that asks the model's ``tf_dp.DPOptimizer`` for
private gradients. Everything else (``compile``, ``fit``, callbacks,
``evaluate``, ``predict``) is unchanged.
"""

import collections.abc
import hashlib
import inspect
import math
import types
import warnings

from absl import logging
import numpy as np
import tensorflow as tf

from tf_dp.data import lots as data_lots
from tf_dp.errors import PrivacyCheckError
from tf_dp.errors import PrivacyError
from tf_dp.errors import SamplingMismatchError
from tf_dp.errors import UnsupportedModelError
from tf_dp.keras import backend
from tf_dp.keras import dp_step
from tf_dp.keras import losses as losses_lib
from tf_dp.keras import model_checks
from tf_dp.keras import optimizer_base
from tf_dp.keras import per_example
from tf_dp.sampling import Sampling


def _dp_train_step(self, data):
  """The DP-SGD training step installed by ``make_private``."""
  keras_backend = dp_step.converted_backend(self)
  x, y, sample_weight = keras_backend.unpack_x_y_sample_weight(data)
  optimizer = self.optimizer
  inner = getattr(optimizer, "inner_optimizer", None)
  if inner is not None and optimizer_base.is_dp_optimizer(inner):
    raise UnsupportedModelError(
        model_checks.MIXED_PRECISION_ERROR.format(
            name=self.name, compute="float16", policy="mixed_float16") +
        f" (Keras wrapped the DPOptimizer in a {type(optimizer).__name__}.)")
  if not optimizer_base.is_dp_optimizer(optimizer):
    raise TypeError(
        "This model was converted with tf_dp.keras.make_private but compiled "
        f"with {type(optimizer).__name__}, which would train without privacy."
        " Compile it with optimizer=tf_dp.DPOptimizer(...).")
  loss_fn = losses_lib.per_example_loss_fn(self)
  y_pred, _, penalty = dp_step.private_step(self, optimizer, loss_fn, x, y,
                                            sample_weight)
  x, y, y_pred, sample_weight = _drawn_rows(optimizer, x, y, y_pred,
                                            sample_weight)
  # The loss Keras reports, with ``penalty`` standing for ``model.losses``
  # when the model adds losses.
  keras_backend.reported_loss(self, x, y, y_pred, sample_weight, penalty)
  logs = self.compute_metrics(x, y, y_pred, sample_weight)
  for name, variable in optimizer.dp_engine.dp_metrics.items():
    logs = dict(logs, **{f"dp_{name}": variable.read_value()})
  return logs


def _drawn_rows(optimizer, x, y, y_pred, sample_weight):
  """``(x, y, y_pred, sample_weight)`` of the examples a Poisson lot drew,
  without its padding rows (weight 0), for the loss and metrics Keras
  reports: Keras's unweighted metrics (``metrics=["accuracy"]``) would
  count the padding. Other samplings: unchanged."""
  if (optimizer.dp_engine.config.sampling != Sampling.POISSON
      or sample_weight is None):
    return x, y, y_pred, sample_weight
  weight = tf.reshape(tf.nest.flatten(sample_weight)[0], [-1])
  rows = tf.where(weight > 0)[:, 0]
  take = lambda t: None if t is None else tf.gather(t, rows)
  return tuple(tf.nest.map_structure(take, part)
               for part in (x, y, y_pred, sample_weight))


class _NoBatch(Exception):
  """The first batch of a ``fit`` input cannot be read (the reason)."""


def _fit_input(args, kwargs):
  """``fit``'s ``x`` and ``y`` as Keras reads them (positional or named)."""
  return (kwargs.get("x", args[0] if args else None),
          kwargs.get("y", args[1] if len(args) > 1 else None))


def _with_fit_input(args, kwargs, x):
  """``fit``'s arguments with ``x`` replaced."""
  if "x" in kwargs or not args:
    return args, dict(kwargs, x=x)
  return (x,) + tuple(args[1:]), kwargs


def _peek_first_batch(self, args, kwargs):
  """``(batch, args, kwargs)``: a few examples of what ``fit`` will train on
  as ``(x, y, sample_weight)`` (None if the input holds no batch), and
  ``fit``'s arguments to train on (a generator's first batch, read here,
  is put back in front of it).

  Reads every kind of input ``fit`` accepts: arrays and tensors (and nests
  of them), a ``tf.data.Dataset``, a Python generator or iterator, and a
  ``keras.utils.PyDataset`` (Keras 3) or ``keras.utils.Sequence`` (Keras 2).

  Raises:
    _NoBatch: for any other input, with the reason.
  """
  keras_backend = dp_step.converted_backend(self)
  x, y = _fit_input(args, kwargs)
  if isinstance(x, tf.data.Dataset):
    return _weighted_rows_of_dataset(keras_backend, x), args, kwargs
  if isinstance(x, (types.GeneratorType, collections.abc.Iterator)):
    try:
      batch = next(x)
    except StopIteration:
      return None, args, kwargs
    args, kwargs = _with_fit_input(args, kwargs, _prepended(batch, x))
    return _unpacked_head(keras_backend, batch), args, kwargs
  if (hasattr(x, "__getitem__") and hasattr(x, "__len__")
      and not hasattr(x, "shape")
      and not isinstance(x, (list, tuple, dict))):
    if len(x) == 0:  # pylint: disable=g-explicit-length-test
      return None, args, kwargs
    return _unpacked_head(keras_backend, x[0]), args, kwargs
  if x is not None and all(hasattr(t, "shape") for t in tf.nest.flatten(x)):
    return (tf.nest.map_structure(_head, x),
            None if y is None else tf.nest.map_structure(_head, y),
            _head(kwargs.get("sample_weight"))), args, kwargs
  raise _NoBatch(f"fit was given a {type(x).__name__}, from which tf_dp "
                 f"cannot read a first batch without consuming it")


def _weighted_rows_of_dataset(keras_backend, dataset, rows=8, batches=16):
  """At least ``rows`` examples of positive weight (all a batch holds
  without weights) from the first batches of ``dataset`` (at most
  ``batches``), as ``(x, y, sample_weight)``; None for an empty dataset.

  A Poisson lot is padded with rows of weight 0 (copies of one example):
  a check on a small first lot's padding compares examples that are equal
  and whose gradients are zero whatever the model does, and proves
  nothing. A Poisson or fixed-size dataset draws fresh lots when iterated,
  so reading a few here changes none of the lots ``fit`` trains on.

  Raises:
    _NoBatch: if those batches hold fewer than 2 such examples (unless the
      whole dataset is batches of one row, which cannot mix examples, or
      holds no example of positive weight).
  """
  parts, first, widest = [], None, 0
  for batch in dataset.take(batches):
    batch = keras_backend.unpack_x_y_sample_weight(batch)
    if batch[2] is None:
      return batch
    first = batch if first is None else first
    widest = max(widest, int(per_example.batch_size(batch[0])))
    parts.append(_positive_weight_rows(batch))
    if sum(int(per_example.batch_size(p[0])) for p in parts) >= rows:
      break
  if not parts:
    return None
  joined = tuple(None if part is None else tf.nest.map_structure(
      lambda *ts: _concat_rows(ts), *part) for part in zip(*parts))
  positive = int(per_example.batch_size(joined[0]))
  if positive < 2:
    if len(parts) < batches and (widest < 2 or positive == 0):
      # The whole dataset is batches of one row (none can mix examples) or
      # holds no example of positive weight (every gradient is 0: its lots
      # release noise only).
      return first
    raise _NoBatch(f"its first {len(parts)} batch(es) hold fewer than 2 "
                   f"examples of positive weight")
  return joined


def _positive_weight_rows(batch):
  """The rows of ``(x, y, sample_weight)`` whose weight is positive."""
  weight = tf.reshape(tf.cast(batch[2], tf.float32),
                      [per_example.batch_size(batch[2]), -1])[:, 0]
  keep = tf.where(weight > 0)[:, 0]

  def gather(t):
    if isinstance(t, tf.SparseTensor):
      return tf.sparse.from_dense(tf.gather(tf.sparse.to_dense(t), keep))
    return tf.gather(t, keep)

  return tuple(None if part is None else tf.nest.map_structure(gather, part)
               for part in batch)


def _concat_rows(parts):
  if isinstance(parts[0], tf.SparseTensor):
    return tf.sparse.concat(0, list(parts), expand_nonconcat_dims=True)
  return tf.concat(list(parts), 0)


def _prepended(first, rest):
  """A generator of ``first``, then of what ``rest`` yields (Keras takes
  generators, not other iterators)."""
  yield first
  yield from rest


def _unpacked_head(keras_backend, batch):
  """A few examples of one batch of a generator or a PyDataset."""
  x, y, sample_weight = keras_backend.unpack_x_y_sample_weight(
      tuple(batch) if isinstance(batch, list) else batch)
  head = lambda s: None if s is None else tf.nest.map_structure(_head, s)
  return head(x), head(y), head(sample_weight)


def _head(t, count=8):
  """The first ``count`` examples of ``t`` (dense, ragged or sparse)."""
  if t is None:
    return None
  if isinstance(t, tf.SparseTensor):
    size = tf.minimum(t.dense_shape[0], count)
    return tf.sparse.slice(t, tf.zeros_like(t.dense_shape), tf.concat(
        [[size], t.dense_shape[1:]], 0))
  return t[:count]


def _build_on_first_batch(self, batch):
  """Builds a model that is not built yet (a Sequential without ``Input``,
  a subclassed model) by calling it on a few examples of what ``fit`` will
  train on, so that the DP state is created for its variables."""
  if self.built and self.trainable_variables:
    return
  if batch is not None:
    self(batch[0], training=False)


def _self_check(self, batch):
  """``check_privacy`` on the first batch of the first ``fit``."""
  if not self._tf_dp_self_check or getattr(self, "_tf_dp_checked", False):  # pylint: disable=protected-access
    return
  from tf_dp.keras import privacy_check  # pylint: disable=g-import-not-at-top
  if batch is None or getattr(self, "optimizer", None) is None:
    return
  x, y, sample_weight = batch
  try:
    privacy_check.check_privacy(self, x, y, sample_weight)
  except PrivacyCheckError:
    raise
  except Exception as e:  # pylint: disable=broad-except
    logging.warning("tf_dp privacy self-check could not run (%s: %s); "
                    "training continues without it.", type(e).__name__, e)
  self._tf_dp_checked = True  # pylint: disable=protected-access


def _first_batch_for_fit(self, args, kwargs):
  """``_peek_first_batch``, when the model needs a batch (to be built, or
  for the self-check); an input it cannot read refuses ``fit`` when the
  self-check is to run, with the reason and the fixes."""
  needs_check = (self._tf_dp_self_check  # pylint: disable=protected-access
                 and not getattr(self, "_tf_dp_checked", False))
  if not needs_check and self.built and self.trainable_variables:
    return None, args, kwargs
  try:
    return _peek_first_batch(self, args, kwargs)
  except (_NoBatch, TypeError, ValueError, tf.errors.OpError) as e:
    if not needs_check:
      return None, args, kwargs
    raise PrivacyError(
        f"tf_dp's privacy self-check could not read the first batch of "
        f"fit's input ({e}), and fit does not train without it: a layer "
        f"that mixes examples would break the privacy guarantee unseen. "
        f"Give fit arrays, a tf.data.Dataset, a generator or a "
        f"keras.utils.PyDataset; or run tf_dp.keras.check_privacy(model, "
        f"x, y) on a batch yourself and convert the model with "
        f"make_private(model, self_check=False).") from e


def strategy_workers(model):
  """The hosts (chief and workers) ``model``'s distribution strategy spans;
  1 without a multi-worker strategy."""
  strategy = getattr(model, "distribute_strategy", None)
  resolver = getattr(strategy, "cluster_resolver", None)
  if resolver is None:
    return 1
  spec = resolver.cluster_spec().as_dict()
  return max(1, sum(len(spec.get(job, ())) for job in ("chief", "worker")))


def _keras_arguments(model, method, args, kwargs):
  """The arguments of a ``model.<method>(*args, **kwargs)`` call by name,
  as Keras's own ``method`` reads them (a subclass may override it with
  ``*args, **kwargs``); {} if they do not bind (Keras then raises)."""
  keras_method = getattr(type(model), method)
  for cls in type(model).__mro__:
    if method in vars(cls) and cls.__module__.startswith(("keras", "tf_keras")):
      keras_method = vars(cls)[method]
      break
  try:
    return inspect.signature(keras_method).bind_partial(
        model, *args, **kwargs).arguments
  except TypeError:
    return {}


def _checked_arguments(model, method, args, kwargs):
  """The arguments of ``model.<method>(*args, **kwargs)`` by name, after
  ``check_sampling_of_fit_input`` passed their ``x`` (``method``: ``"fit"``
  or ``"train_on_batch"``; ``model.optimizer`` is a DP optimizer)."""
  bound = _keras_arguments(model, method, args, kwargs)
  engine = model.optimizer.dp_engine
  check_sampling_of_fit_input(engine.config, bound.get("x"),
                              engine.recorded_population_size(), call=method,
                              workers=strategy_workers(model))
  return bound


def _dp_train_on_batch(self, *args, **kwargs):
  """``train_on_batch``, refused under a sampling that one batch cannot
  show (``check_sampling_of_fit_input``)."""
  if optimizer_base.is_dp_optimizer(getattr(self, "optimizer", None)):
    _checked_arguments(self, "train_on_batch", args, kwargs)
    # Keras reuses the step traced by an earlier fit, whose n (inferred
    # from that fit's arrays) is no longer known: check it here.
    self.optimizer.dp_engine.require_population_size()
  return type(self).train_on_batch(self, *args, **kwargs)


def training_examples(bound):
  """How many examples a ``fit`` call trains on, or None.

  Known for arrays and tensors (and nests of them): their length, less the
  part ``validation_split`` holds out (Keras trains on the first
  ``floor(n * (1 - validation_split))``). None for datasets, generators and
  anything else of unknown length.

  Args:
    bound: ``fit``'s arguments by name (``_keras_arguments``).
  """
  x = bound.get("x")
  leaves = tf.nest.flatten(x) if x is not None else []
  if not leaves or isinstance(leaves[0], tf.data.Dataset):
    return None
  shape = getattr(leaves[0], "shape", None)
  if shape is None or len(shape) == 0 or shape[0] is None:
    return None
  n = int(shape[0])
  split = bound.get("validation_split") or 0.0
  if split and bound.get("validation_data") is None:
    n = int(math.floor(n * (1.0 - split)))
  return n if n >= 1 else None


def expected_lot_examples(bound, examples, batches_per_lot):
  """The most examples a lot of ``fit``'s arrays holds (``batches_per_lot``
  batches of ``batch_size``, Keras's default 32, within one pass over the
  ``examples``), or None when the input is not arrays."""
  if examples is None:
    return None
  return min(examples, (bound.get("batch_size") or 32) * batches_per_lot)


def check_lots_within_passes(config, bound, examples):
  """Refuses a ``fit`` on arrays whose shuffled lots of several batches
  could straddle two passes over the arrays.

  A shuffled lot of ``k = gradient_accumulation_steps`` batches is
  recorded as one sample of ``k * batch_size`` distinct examples. With
  ``steps_per_epoch``, Keras 2 draws the batches of every epoch from one
  iterator over reshuffled passes, so a lot that starts less than ``k``
  batches before the end of a pass ends in the next one, and may hold an
  example twice (a 2C contribution to one lot). Lots start at a pass's
  first batch exactly when the batches of one pass are a multiple of k.
  Keras 3 ends an epoch at the end of a pass; the rule is the same for
  both flavours. Without ``steps_per_epoch`` an epoch is one pass, and
  ``LotBoundaryGuard`` requires its steps to be a multiple of k.

  Privacy contract: called by ``fit`` before any step.

  Raises:
    SamplingMismatchError: naming the batches per pass, k and the fixes.
  """
  k = config.gradient_accumulation_steps
  if (k == 1 or config.sampling != Sampling.SHUFFLED or examples is None
      or not bound.get("steps_per_epoch")):
    return
  batch_size = bound.get("batch_size") or 32
  per_pass = -(-examples // batch_size)
  if per_pass % k:
    raise SamplingMismatchError(
        f"fit on {examples} examples in batches of {batch_size} makes "
        f"{per_pass} batches per pass over the arrays, not a multiple of "
        f"gradient_accumulation_steps={k}: with steps_per_epoch="
        f"{bound.get('steps_per_epoch')} a lot of {k} shuffled batches would "
        f"take batches from two passes and could hold an example twice, "
        f"which its ledger sample does not account for. Choose batch_size "
        f"so that the batches per pass are a multiple of {k}, or leave "
        f"steps_per_epoch out.")


# The samplers whose datasets hold the lots each declared sampling promises.
_SAMPLERS = {Sampling.FIXED_SIZE: "tf_dp.data.fixed_size_sampled_batches",
             Sampling.POISSON: "tf_dp.data.poisson_sampled_batches"}


def check_correlated_noise_fit(engine, bound, examples):
  """With ``noise_strategy``: refuses a ``fit`` whose participation the
  strategy does not cover, and declares its passes to the ledger.

  Privacy contract: a correlated-noise run is accounted from the passes
  and the fewest steps between two participations of one example. They
  are known only for arrays taken in one fixed order
  (``fit(..., shuffle=False)``, whole epochs: each example once per pass
  at the same step of the pass, so ``steps_per_pass`` apart); anything else
  is refused before any step, and so is a fit that would run more steps
  than the strategy was built for or more passes than ``max_passes``.

  Raises:
    PrivacyError: naming what is not covered and the fix.
  """
  config = engine.config
  strategy = config.noise_strategy
  if strategy is None:
    return
  if examples is None:
    raise PrivacyError(
        "DPOptimizer(noise_strategy=...) trains on arrays or tensors with "
        "fit(..., shuffle=False): the order of a dataset or generator, and "
        "so how far apart one example's participations are, cannot be "
        "checked. Pass arrays (shuffled once beforehand if you like).")
  if bound.get("shuffle", True) is not False:
    raise PrivacyError(
        "DPOptimizer(noise_strategy=...) needs fit(..., shuffle=False): Keras "
        "reshuffles arrays every epoch, which can put one example in two "
        "consecutive steps, where the strategy's sensitivity does not hold. "
        "Shuffle the arrays once before fit if you like.")
  if bound.get("steps_per_epoch"):
    raise PrivacyError(
        "DPOptimizer(noise_strategy=...) runs whole passes: leave "
        "steps_per_epoch out.")
  batch_size = bound.get("batch_size") or 32
  batches = -(-examples // batch_size)
  per_lot = config.gradient_accumulation_steps
  if batches % per_lot:
    raise PrivacyError(
        f"With noise_strategy, a pass of {batches} batches must hold whole "
        f"lots of gradient_accumulation_steps={per_lot} batches.")
  steps_per_pass = batches // per_lot
  ledger = engine.ledger.correlated_noise
  digest = _training_data_digest(bound, examples)
  ledger.check_steps_per_pass(steps_per_pass, digest)
  run = int(ledger.steps_run.numpy())
  epochs = int(bound.get("epochs", 1)) - int(bound.get("initial_epoch", 0))
  total = run + max(epochs, 0) * steps_per_pass
  passes = -(-total // steps_per_pass)
  if total > strategy.steps or passes > config.max_passes:
    raise PrivacyError(
        f"This fit would bring the correlated-noise run to {total} steps in "
        f"{passes} passes of {steps_per_pass} steps, but the strategy was "
        f"built for {strategy.steps} steps and max_passes="
        f"{config.max_passes}. Build the strategy for at least {total} steps "
        f"and DPOptimizer(..., max_passes={passes}), or train fewer epochs.")
  if passes > 1 and steps_per_pass < strategy.bands:
    raise PrivacyError(
        f"A pass of {steps_per_pass} steps is shorter than the strategy's "
        f"{strategy.bands} bands: one example's participations would share "
        f"noise rows. Use a strategy with at most {steps_per_pass} bands, or "
        f"smaller batches.")
  ledger.set_steps_per_pass(steps_per_pass, digest)


def _training_data_digest(bound, examples):
  """SHA-256 of the first ``examples`` rows of ``fit``'s x and y, in
  order: a later fit of the same correlated-noise run must take the same
  examples in the same order."""
  digest = hashlib.sha256()
  for part in ("x", "y", "sample_weight"):
    for leaf in tf.nest.flatten(bound.get(part)):
      if leaf is None:
        continue
      rows = np.ascontiguousarray(np.asarray(leaf)[:examples])
      digest.update(f"{part}{rows.dtype}{rows.shape}".encode())
      digest.update(memoryview(rows).cast("B"))
  return digest.hexdigest()


def check_sampling_of_fit_input(config, x, recorded_population_size,
                                call="fit", workers=1):
  """Refuses a ``fit`` input whose lots are not what ``config.sampling``
  declares.

  Keras batches arrays, tensors and unmarked datasets or generators as they
  come (arrays shuffled once per epoch, or in order): that is
  ``sampling="shuffled"``. ``"fixed_size"`` and ``"poisson"`` declare lots
  drawn as the accountant assumes (independent uniform subsets; independent
  inclusions with probability q): only a dataset marked with that sampling
  is trusted to hold them (the datasets of ``tf_dp.data``'s samplers, or
  one marked with ``tf_dp.data.declare_sampling``). Its q (Poisson), its
  batches per lot and, when the mark records one, its n must be the
  optimizer's. Otherwise the ledger would record lots that were never
  drawn, and the epsilon computed from it would not be a guarantee (a
  Poisson lot of ``gradient_accumulation_steps`` independent draws, for
  one, may hold an example several times). A marked dataset under another
  sampling is refused as well: its padded lots are not shuffled batches.
  Custom loops (``DPOptimizer.private_step``) and Estimator input
  functions are not checked here: their lots are the caller's
  responsibility.

  ``train_on_batch`` is checked the same way: its one batch carries no
  mark, so it trains only under ``"shuffled"``. A sampler's dataset built
  with a fixed ``seed`` trains with a warning: every dataset built with that
  seed draws the same lots.

  Privacy contract: called by ``fit`` and ``train_on_batch`` before any
  step, so a refused call changes no weight and writes nothing to the
  ledger.

  Args:
    config: The ``DPConfig`` of the model's ``DPOptimizer``.
    x: The ``x`` given to ``fit`` (the batch of ``train_on_batch``).
    recorded_population_size: The n the ledger will record with the lots
      (``DPEngine.recorded_population_size``).
    call: ``"fit"`` or ``"train_on_batch"``, for the messages.
    workers: Hosts the model's distribution strategy spans
      (``strategy_workers``). Over several, each worker iterates its own copy
      of a sampler's dataset and Keras shards it by batches, so a global
      step joins batches of different draws: Poisson and fixed-size lots are
      refused there.

  Raises:
    SamplingMismatchError: naming what the optimizer declares, what was
      given and the fix.
  """
  declared = (data_lots.declared_sampling(x)
              if isinstance(x, tf.data.Dataset) else None)
  sampling = config.sampling
  if sampling in _SAMPLERS and workers > 1:
    raise SamplingMismatchError(
        f"DPOptimizer(sampling={sampling!r}) cannot train over {workers} "
        f"workers: each worker iterates its own copy of the dataset and "
        f"Keras shards it by batches, so a global step would join batches "
        f"of different draws (an example could be in a lot twice) while the "
        f"ledger records one {sampling} lot. Train {sampling} lots on one "
        f"host (MirroredStrategy over its devices), or use "
        f"sampling=\"shuffled\" with a dataset of global batches.")
  if declared is None:
    if sampling not in _SAMPLERS:
      return
    if call != "fit":
      given = (f"one batch ({call} takes one batch, which carries no "
               f"sampling mark; use fit on the sampler's dataset, or "
               f"DPOptimizer.private_step in a custom loop over its lots)")
    elif isinstance(x, tf.data.Dataset):
      given = ("a tf.data.Dataset without a sampling mark (a dataset built "
               "by hand, or derived from a sampler's with .map, .batch, "
               ".prefetch, ...: a derived dataset carries no mark)")
    elif isinstance(x, (list, tuple, dict)) or hasattr(x, "shape"):
      given = ("arrays or tensors, which Keras batches itself (shuffled "
               "once per epoch, or in order)")
    else:
      given = (f"a {type(x).__name__}, which carries no sampling mark "
               f"(only a tf.data.Dataset can)")
    raise SamplingMismatchError(
        f"DPOptimizer(sampling={sampling!r}) declares lots drawn by "
        f"{_SAMPLERS[sampling]}, but {call} was given {given}: the privacy "
        f"ledger would record {sampling} lots that were never drawn, and "
        f"its epsilon would not hold. Fix it in one of three ways: (1) pass "
        f"fit the dataset of {_SAMPLERS[sampling]}(x, y, ...) unchanged; "
        f"(2) if your own sampler draws such lots, mark its dataset with "
        f"tf_dp.data.declare_sampling(dataset, {sampling!r}, ...); or (3) "
        f"to train on arrays, use DPOptimizer(..., sampling=\"shuffled\") "
        f"(each example once per epoch; accounted as fixed-size sampling, "
        f"with a warning).")
  what = f"sampling={declared.sampling!r}"
  if declared.sampling_probability is not None:
    what += f", sampling_probability={declared.sampling_probability!r}"
  if declared.sampling != sampling:
    raise SamplingMismatchError(
        f"fit was given a dataset whose lots are marked as drawn with "
        f"{what}, but DPOptimizer declares sampling={sampling!r}: the "
        f"ledger would record the lots as {sampling} lots (of their padded "
        f"size), and its epsilon would not hold. Build the DPOptimizer "
        f"with {what}, or train on lots drawn as it declares.")
  if sampling == Sampling.POISSON and not math.isclose(
      declared.sampling_probability, config.sampling_probability,
      rel_tol=1e-12):
    raise SamplingMismatchError(
        f"fit was given Poisson lots drawn with sampling_probability="
        f"{declared.sampling_probability!r}, but DPOptimizer declares "
        f"sampling_probability={config.sampling_probability!r}: the ledger "
        f"would record the wrong q. Pass the same sampling_probability to "
        f"the sampler and to DPOptimizer.")
  if declared.batches_per_lot != config.gradient_accumulation_steps:
    raise SamplingMismatchError(
        f"fit was given {sampling} lots of batches_per_lot="
        f"{declared.batches_per_lot} batches, but DPOptimizer("
        f"gradient_accumulation_steps={config.gradient_accumulation_steps})"
        f" noises every {config.gradient_accumulation_steps} batches "
        f"together: its lots would not be the lots drawn (an example could "
        f"be in one several times), and the ledger's epsilon would not "
        f"hold. Draw the lots with batches_per_lot="
        f"{config.gradient_accumulation_steps}, or set "
        f"gradient_accumulation_steps={declared.batches_per_lot}.")
  if declared.population_size not in (None, recorded_population_size):
    raise SamplingMismatchError(
        f"fit was given {sampling} lots drawn from n = "
        f"{declared.population_size} examples, but the DPOptimizer's ledger "
        f"records population_size={recorded_population_size}: it would "
        f"account the lots with the wrong n. Pass population_size="
        f"{declared.population_size} (and give its ledger that n).")
  if declared.seed is not None:
    warnings.warn(
        f"fit trains on lots drawn with seed={declared.seed}: every dataset "
        f"built with that seed draws the same lots (in another fit, or "
        f"another process), and the ledger counts each as a fresh draw. "
        f"Leave seed out (fresh OS entropy) outside tests.", UserWarning,
        stacklevel=4)  # the caller of fit


def _class_weights_into_lots(args, kwargs):
  """``fit``'s arguments with ``class_weight`` folded into the weights of a
  sampler's lots (Keras refuses class weights beside sample weights, and
  a Poisson lot's weights mark which rows were drawn)."""
  x, _ = _fit_input(args, kwargs)
  class_weight = kwargs.get("class_weight")
  if not class_weight or not isinstance(x, tf.data.Dataset) or (
      data_lots.declared_sampling(x) is None):
    return args, kwargs
  spec = x.element_spec
  if not isinstance(spec, tuple) or len(spec) != 3:
    return args, kwargs  # (x, y) lots: Keras weights the classes itself.
  return _with_fit_input(args, dict(kwargs, class_weight=None),
                         data_lots.with_class_weights(x, class_weight))


def _dp_fit(self, *args, **kwargs):
  """``fit`` with tf_dp's self-check and lot-boundary guard; refuses an
  input whose lots are not the declared sampling's; takes
  ``population_size`` from the arrays when it was not given, for this fit
  only, and refuses (before any step) an input of unknown length when it
  was not."""
  from tf_dp.keras import callbacks as callbacks_lib  # pylint: disable=g-import-not-at-top
  optimizer = getattr(self, "optimizer", None)
  engine = (optimizer.dp_engine
            if optimizer_base.is_dp_optimizer(optimizer) else None)
  inferred = False
  if engine is not None:
    bound = _checked_arguments(self, "fit", args, kwargs)
    examples = training_examples(bound)
    engine.expected_lot_examples = expected_lot_examples(
        bound, examples, engine.config.gradient_accumulation_steps)
    check_lots_within_passes(engine.config, bound, examples)
    check_correlated_noise_fit(engine, bound, examples)
    if examples is not None:
      inferred = engine.infer_population_size(examples)
    engine.require_population_size()
  try:
    args, kwargs = _class_weights_into_lots(args, kwargs)
    batch, args, kwargs = _first_batch_for_fit(self, args, kwargs)
    _build_on_first_batch(self, batch)
    _self_check(self, batch)
    callbacks = callbacks_lib.with_tf_dp_callbacks(kwargs.pop("callbacks",
                                                             None))
    return type(self).fit(self, *args, callbacks=callbacks, **kwargs)
  finally:
    if inferred:  # That n was this fit's only.
      engine.forget_inferred_population_size()


def make_private(model, self_check=True):
  """Converts a Keras model in place so that ``fit`` trains with DP-SGD.

  Works for Sequential, Functional and subclassed models on Keras 3 and
  Keras 2. Compile the returned model with ``tf_dp.DPOptimizer``.

  Privacy contract: see ``tf_dp.DPOptimizer``. The conversion refuses
  models whose per-example gradients would not be per-example
  (BatchNormalization, activity regularisers) and makes Keras 3 dropout draw
  an independent mask per example. The first ``fit`` runs
  ``tf_dp.keras.check_privacy`` on a few examples of its first batch: a
  layer that mixes examples, or a fast rule that disagrees with the
  per-example reference, stops training before any step with the reason.
  ``fit`` on arrays, tensors or unmarked datasets trains only under
  ``sampling="shuffled"`` (what Keras does with them); under
  ``"fixed_size"`` or ``"poisson"`` it trains only on a dataset marked with
  that sampling, and is otherwise refused before any step
  (``check_sampling_of_fit_input``).

  Args:
    model: A Keras model (built or not).
    self_check: Run the privacy self-check on the first ``fit`` (a few
      seconds, once; later steps are not affected).

  Returns:
    The same model object, converted.

  Raises:
    ValueError: for layers that break per-example DP (with the fix).

  Example:
    >>> model = tf_dp.keras.make_private(model)
  """
  keras_backend = backend.for_object(model)
  if model.built and not model.trainable_variables:
    raise ValueError("The model has no trainable variables: there is "
                     "nothing to train privately.")
  model_checks.validate_and_prepare(model)
  model._tf_dp_flavor = keras_backend.NAME  # pylint: disable=protected-access
  model._tf_dp_self_check = bool(self_check)  # pylint: disable=protected-access
  model.train_step = types.MethodType(_dp_train_step, model)
  model.fit = types.MethodType(_dp_fit, model)
  model.train_on_batch = types.MethodType(_dp_train_on_batch, model)
  # A fit before the conversion traced the non-private step: trace anew.
  if getattr(model, "train_function", None) is not None:
    model.train_function = None
  return model


def is_private(model):
  """Whether ``model`` was converted by ``make_private``."""
  return dp_step.converted_backend(model) is not None
