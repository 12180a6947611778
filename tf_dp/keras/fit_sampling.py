"""``fit``'s input against the sampling its ``DPOptimizer`` declares.

Checked before any step: that a sampler's lots are what the ledger will
record (``check_sampling_of_fit_input``), that shuffled lots of several
batches stay within one pass over arrays (``check_lots_within_passes``),
and how many examples a ``fit`` on arrays trains on (its population size).
"""

import hashlib
import inspect
import math
from typing import Any, Dict, Optional, Sequence, cast
import warnings

import numpy as np
import tensorflow as tf
from tensorflow.python.eager import context  # pylint: disable=g-direct-tensorflow-import

from tf_dp.core import config as config_lib
from tf_dp.core import lot_engine
from tf_dp.data import distributed as data_distributed
from tf_dp.data import lots as data_lots
from tf_dp.errors import PrivacyError
from tf_dp.errors import SamplingMismatchError
from tf_dp.sampling import PrivacyUnit
from tf_dp.sampling import Sampling


def strategy_workers(model: Any) -> int:
  """The hosts (chief and workers) ``model``'s distribution strategy spans;
  1 without a multi-worker strategy."""
  strategy = getattr(model, "distribute_strategy", None)
  resolver = getattr(strategy, "cluster_resolver", None)
  if resolver is None:
    return 1
  spec = resolver.cluster_spec().as_dict()
  return max(1, sum(len(spec.get(job, ())) for job in ("chief", "worker")))


def strategy_replicas(model: Any) -> int:
  """The replicas in sync of ``model``'s distribution strategy (1 without
  one)."""
  strategy = getattr(model, "distribute_strategy", None)
  return getattr(strategy, "num_replicas_in_sync", 1) or 1


def keras_arguments(model: Any, method: str, args: Sequence[Any],
                    kwargs: Dict[str, Any]) -> Dict[str, Any]:
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


def checked_arguments(model: Any, method: str, args: Sequence[Any],
                      kwargs: Dict[str, Any]) -> Dict[str, Any]:
  """The arguments of ``model.<method>(*args, **kwargs)`` by name, after
  ``check_sampling_of_fit_input`` passed their ``x`` (``method``: ``"fit"``
  or ``"train_on_batch"``; ``model.optimizer`` is a DP optimizer)."""
  bound = keras_arguments(model, method, args, kwargs)
  engine = model.optimizer.dp_engine
  check_sampling_of_fit_input(engine.config, bound.get("x"),
                              engine.recorded_population_size(), call=method,
                              workers=strategy_workers(model),
                              replicas=strategy_replicas(model))
  return bound


def training_examples(bound: Dict[str, Any]) -> Optional[int]:
  """How many examples a ``fit`` call trains on, or None.

  Known for arrays and tensors (and nests of them): their length, less the
  part ``validation_split`` holds out (Keras trains on the first
  ``floor(n * (1 - validation_split))``). None for datasets, generators and
  anything else of unknown length.

  Args:
    bound: ``fit``'s arguments by name (``keras_arguments``).
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


def expected_lot_examples(bound: Dict[str, Any], examples: Optional[int],
                          batches_per_lot: int) -> Optional[int]:
  """The most examples a lot of ``fit``'s arrays holds (``batches_per_lot``
  batches of ``batch_size``, Keras's default 32, within one pass over the
  ``examples``), or None when the input is not arrays."""
  if examples is None:
    return None
  return min(examples, (bound.get("batch_size") or 32) * batches_per_lot)


def warn_if_shuffle_is_seeded(config: config_lib.DPConfig,
                              bound: Dict[str, Any],
                              examples: Optional[int]) -> None:
  """Warns when Keras shuffles ``fit``'s arrays under TensorFlow's global
  random seed (``tf.random.set_seed``, ``keras.utils.set_random_seed``).

  Keras draws the order of the arrays with TensorFlow random ops, which
  the global seed makes reproducible: every process with that seed trains
  on the same batches, and whoever knows the seed knows which batch holds
  each example, while the ledger accounts the batches of
  ``sampling="shuffled"`` as random (as fixed-size sampling). Like a
  sampler's fixed ``seed``, it is for tests.
  """
  if (config.sampling is not Sampling.SHUFFLED or examples is None
      or bound.get("shuffle", True) is False):
    return
  seed = context.global_seed()
  if seed is None:
    return
  warnings.warn(
      f"fit shuffles the arrays with TensorFlow's global random seed set "
      f"({seed}: tf.random.set_seed or keras.utils.set_random_seed): every "
      f"run with that seed trains on the same batches, and anyone who "
      f"knows the seed knows which batch holds each example, while the "
      f"ledger accounts the shuffled batches as random. Leave the global "
      f"seed unset outside tests (seed the initializers instead).",
      UserWarning, stacklevel=4)  # the caller of fit


def check_lots_within_passes(config: config_lib.DPConfig, bound: Dict[str, Any],
                             examples: Optional[int]) -> None:
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
  if (k == 1 or examples is None or not bound.get("steps_per_epoch")
      or config.sampling not in (Sampling.SHUFFLED, Sampling.FIXED_ORDER)):
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
def check_correlated_noise_fit(engine: lot_engine.LotEngine,
                               bound: Dict[str, Any],
                               examples: Optional[int]) -> None:
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
  digest = _training_data_digest(bound, examples, batch_size * per_lot)
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
  ledger.set_steps_per_pass(steps_per_pass, digest, passes=max(epochs, 0))


def end_correlated_noise_fit(engine: lot_engine.LotEngine) -> None:
  """With ``noise_strategy``: ends the passes the last
  ``check_correlated_noise_fit`` declared (call when that ``fit`` returns
  or raises): a later step outside a ``fit`` (``train_on_batch``,
  ``private_step``) is then recorded as outside the fixed order, and the
  record is refused."""
  ledger = getattr(engine.ledger, "correlated_noise", None)
  if engine.config.noise_strategy is not None and ledger is not None:
    ledger.end_declared_passes()


def check_step_outside_fit(engine: lot_engine.LotEngine, call: str) -> None:
  """Refuses (eagerly, before the step) a ``call`` step of a
  correlated-noise run whose earlier steps were ``fit``'s fixed-order
  passes: its examples are not a pass's, and the participation the ledger
  records for the passes would not hold.

  Raises:
    PrivacyError: naming ``fit(..., shuffle=False)`` as the way on.
  """
  ledger = getattr(engine.ledger, "correlated_noise", None)
  if (engine.config.noise_strategy is None or ledger is None
      or not int(ledger.steps_per_pass.numpy())):
    return
  raise PrivacyError(
      f"This correlated-noise run's steps so far were fit's passes over its "
      f"arrays in one fixed order, accounted as each example taking part "
      f"once per pass, a pass apart. A {call} step takes examples outside "
      f"that order (an example could take part again at once), so the "
      f"record would no longer hold. Continue with fit(..., shuffle=False) "
      f"on the same arrays.")


def check_train_on_batch_lot(config: config_lib.DPConfig) -> None:
  """Refuses (before the step) a ``train_on_batch`` of a model whose lots
  take several batches (``gradient_accumulation_steps`` > 1).

  A shuffled lot of k batches is recorded as one sample of k * B distinct
  examples. ``train_on_batch``'s batches are the caller's: nothing shows
  that k of them hold distinct examples (the same batch twice puts each of
  its examples in the lot twice, a contribution of 2C to one lot that the
  sample does not account for), nor that they continue no lot left open by
  an interrupted ``fit``.

  Raises:
    SamplingMismatchError: naming ``fit`` and ``private_step`` as the ways
      on.
  """
  k = config.gradient_accumulation_steps
  if k == 1:
    return
  raise SamplingMismatchError(
      f"train_on_batch with gradient_accumulation_steps={k}: the ledger "
      f"would record {k} of its batches as one lot of {k} x batch_size "
      f"distinct examples, but nothing shows that the batches given hold "
      f"distinct examples (the same batch twice puts each of its examples "
      f"in the lot twice, which the lot's sample does not account for). "
      f"Train with fit, which cuts one pass into lots, or call "
      f"DPOptimizer.private_step in a custom loop over lots you draw.")


def _training_data_digest(bound: Dict[str, Any], examples: int,
                          rows_per_lot: int) -> str:
  """SHA-256 of the first ``examples`` rows of ``fit``'s x and y, in
  order, and of the rows per lot: a later fit of the same correlated-noise
  run must take the same examples in the same order, cut into the same
  lots (the step of example i in a pass is ``i // rows_per_lot``)."""
  digest = hashlib.sha256()
  digest.update(f"rows_per_lot{int(rows_per_lot)}".encode())
  for part in ("x", "y", "sample_weight"):
    for leaf in tf.nest.flatten(bound.get(part)):
      if leaf is None:
        continue
      rows = np.ascontiguousarray(np.asarray(leaf)[:examples])
      digest.update(f"{part}{rows.dtype}{rows.shape}".encode())
      digest.update(rows.data.cast("B"))
  return digest.hexdigest()


_SAMPLERS = {Sampling.FIXED_SIZE: "tf_dp.data.fixed_size_sampled_batches",
             Sampling.POISSON: "tf_dp.data.poisson_sampled_batches"}
_USER_SAMPLERS = {Sampling.FIXED_SIZE: "tf_dp.data.fixed_size_sampled_users",
                  Sampling.POISSON: "tf_dp.data.poisson_sampled_users"}


def _sampler(config: config_lib.DPConfig) -> str:
  """The sampler whose lots ``config`` declares."""
  by_unit = (_USER_SAMPLERS if config.privacy_unit is PrivacyUnit.USER
             else _SAMPLERS)
  return by_unit[config.sampling]


def _check_privacy_unit_of_lots(config: config_lib.DPConfig,
                                declared: Any) -> None:
  """Refuses lots drawn over another unit than ``config.privacy_unit``, or
  user-level lots of another ``max_examples_per_user``."""
  if declared.privacy_unit != config.privacy_unit:
    if config.privacy_unit is PrivacyUnit.USER:
      raise SamplingMismatchError(
          f"DPOptimizer(privacy_unit='user') clips each user's rows as one "
          f"record and accounts q and n over users, but fit was given lots "
          f"drawn over examples: they do not sample users, and epsilon "
          f"would not be per user. Draw the lots with {_sampler(config)}(x, "
          f"y, user_ids, ..., max_examples_per_user="
          f"{config.max_examples_per_user}).")
    raise SamplingMismatchError(
        f"fit was given lots drawn over users (privacy_unit='user', "
        f"max_examples_per_user={declared.max_examples_per_user}), but the "
        f"DPOptimizer's privacy_unit is 'example': it would clip each row "
        f"alone and account q over users as if it were over examples. Pass "
        f"DPOptimizer(..., privacy_unit='user', max_examples_per_user="
        f"{declared.max_examples_per_user}, population_size=<users>), or draw "
        f"lots over examples with {_SAMPLERS[config.sampling]}.")
  if declared.max_examples_per_user != config.max_examples_per_user:
    raise SamplingMismatchError(
        f"fit was given user lots of max_examples_per_user="
        f"{declared.max_examples_per_user} rows per user, but DPOptimizer("
        f"max_examples_per_user={config.max_examples_per_user}) would read "
        f"other rows as one user's record. Pass the same "
        f"max_examples_per_user to the sampler and to DPOptimizer.")


def _check_users_split_across_replicas(config: config_lib.DPConfig, x: Any,
                                       replicas: int) -> None:
  """Refuses user lots whose batches a strategy of ``replicas`` replicas
  would split inside a user.

  The strategy splits every batch into ``replicas`` parts of consecutive
  rows (as equal as the rows allow) and each replica clips the users of its
  part (every k consecutive rows). The parts hold whole users exactly when
  the batch's users are a multiple of ``replicas``; otherwise a user's rows
  straddle two parts, and clipping each part's rows as users would clip a
  user once per replica (a contribution of up to 2C). The replicas' steps
  fail on such parts (their rows are not multiples of k), with an error
  naming neither cause nor fix; this check refuses them before any step.
  A batch of unknown size cannot be shown to split and is refused too.
  """
  k = config.max_examples_per_user
  leaves = tf.nest.flatten(x.element_spec)
  rows = leaves[0].shape[0] if leaves and leaves[0].shape.rank else None
  if rows is not None and rows % k == 0 and (rows // k) % replicas == 0:
    return
  size = ("of unknown size" if rows is None else
          f"of {rows} rows ({rows / k:g} users of max_examples_per_user={k} "
          f"rows)")
  raise SamplingMismatchError(
      f"DPOptimizer(privacy_unit='user') under a tf.distribute strategy of "
      f"{replicas} replicas: the strategy splits each batch into {replicas} "
      f"parts of consecutive rows, and fit was given user lots with batches "
      f"{size}, which do not split into whole users: a user split across "
      f"replicas would be clipped once per replica, and the clip bound per "
      f"user would not hold. Draw batches of a multiple of {replicas} users: "
      f"users_per_batch of fixed_size_sampled_users, or max_users_per_lot "
      f"of poisson_sampled_users a multiple of {replicas} x "
      f"batches_per_lot.")


def check_sampling_of_fit_input(config: config_lib.DPConfig, x: Any,
                                recorded_population_size: int,
                                call: str = "fit", workers: int = 1,
                                replicas: int = 1) -> None:
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
      (``strategy_workers``). Over several, Poisson and fixed-size lots
      train only from a sampler's dataset (``fit`` redraws it on every
      worker with ``tf_dp.data.distribute_lots``) or a
      ``distribute_lots`` result; any other dataset would be iterated by
      each worker on its own.
    replicas: Replicas in sync of the model's strategy
      (``strategy_replicas``). User lots must split into whole users
      across them (``_check_users_split_across_replicas``).

  Raises:
    SamplingMismatchError: naming what the optimizer declares, what was
      given and the fix.
  """
  declared = (data_lots.declared_sampling(x)
              if isinstance(x, tf.data.Dataset) else
              data_distributed.distributed_declaration(x))
  sampling = config.sampling
  name = config.caller.constructor  # The optimizer as the caller built it.
  redrawn = workers > 1 and (
      data_lots.lot_recipe(x) is not None
      or data_distributed.distributed_declaration(x) is not None)
  if sampling in _SAMPLERS and workers > 1 and not redrawn:
    raise SamplingMismatchError(
        f"{name}(sampling={sampling!r}) over {workers} workers trains on "
        f"the dataset of a tf_dp.data sampler, unchanged: every worker "
        f"redraws the same global lots from the sampler's recipe and reads "
        f"its replicas' parts. fit was given a dataset that cannot be "
        f"redrawn (marked with declare_sampling, or derived from a "
        f"sampler's with .map, .prefetch, ...): each worker would iterate "
        f"its own copy, and a global step would join parts of different "
        f"draws while the ledger records one {sampling} lot. Pass the "
        f"sampler's dataset (or tf_dp.data.distribute_lots(strategy, "
        f"lots)) to fit.")
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
    user = config.privacy_unit is PrivacyUnit.USER
    unit_arg = ", privacy_unit='user'" if user else ""
    shuffled = config.caller.setting("sampling", '"shuffled"')
    third = ("lots over users are drawn by a sampler only (Keras cannot "
             "draw users)" if user else
             f"to train on arrays, use {shuffled} (each example once per "
             f"epoch; accounted as fixed-size sampling, with a warning)")
    raise SamplingMismatchError(
        f"{name}(sampling={sampling!r}) declares lots drawn by "
        f"{_sampler(config)}, but {call} was given {given}: the privacy "
        f"ledger would record {sampling} lots that were never drawn, and "
        f"its epsilon would not hold. Fix it: (1) pass fit the dataset of "
        f"{_sampler(config)}(x, y, ...) unchanged; (2) if your own sampler "
        f"draws such lots, mark its dataset with tf_dp.data.declare_sampling"
        f"(dataset, {sampling!r}, ...{unit_arg}); (3) {third}.")
  what = f"sampling={declared.sampling!r}"
  if declared.sampling_probability is not None:
    what += f", sampling_probability={declared.sampling_probability!r}"
  if declared.sampling != sampling:
    raise SamplingMismatchError(
        f"fit was given a dataset whose lots are marked as drawn with "
        f"{what}, but {name} declares sampling={sampling!r}: the "
        f"ledger would record the lots as {sampling} lots (of their padded "
        f"size), and its epsilon would not hold. Build the {name} "
        f"with {what}, or train on lots drawn as it declares.")
  _check_privacy_unit_of_lots(config, declared)
  if config.privacy_unit is PrivacyUnit.USER and replicas > 1 and (
      not redrawn):  # distribute_lots cuts batches into whole users.
    _check_users_split_across_replicas(config, x, replicas)
  # A Poisson mark and a Poisson configuration both hold their q.
  if sampling is Sampling.POISSON and not math.isclose(
      cast(float, declared.sampling_probability),
      cast(float, config.sampling_probability), rel_tol=1e-12):
    raise SamplingMismatchError(
        f"fit was given Poisson lots drawn with sampling_probability="
        f"{declared.sampling_probability!r}, but {name} declares "
        f"sampling_probability={config.sampling_probability!r}: the ledger "
        f"would record the wrong q. Pass the same sampling_probability to "
        f"the sampler and to {name}.")
  if declared.batches_per_lot != config.gradient_accumulation_steps:
    raise SamplingMismatchError(
        f"fit was given {sampling} lots of batches_per_lot="
        f"{declared.batches_per_lot} batches, but {name}("
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
        f"{declared.population_size} {declared.privacy_unit}s, but the "
        f"{name}'s ledger records population_size="
        f"{recorded_population_size}: it would "
        f"account the lots with the wrong n. Pass population_size="
        f"{declared.population_size} (and give its ledger that n).")
  if declared.seed is not None:
    warnings.warn(
        f"fit trains on lots drawn with seed={declared.seed}: every dataset "
        f"built with that seed draws the same lots (in another fit, or "
        f"another process), and the ledger counts each as a fresh draw. "
        f"Leave seed out (fresh OS entropy) outside tests.", UserWarning,
        stacklevel=4)  # the caller of fit
