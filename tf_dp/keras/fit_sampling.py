"""``fit``'s input against the sampling its ``DPOptimizer`` declares.

Checked before any step: that a sampler's lots are what the ledger will
record (``check_sampling_of_fit_input``), that shuffled lots of several
batches stay within one pass over arrays (``check_lots_within_passes``),
and that ``train_on_batch`` takes no lot of several batches
(``check_train_on_batch_lot``).
"""

import math
from typing import Any, Dict, Optional, Sequence, cast
import warnings

import tensorflow as tf
from tensorflow.python.eager import context  # pylint: disable=g-direct-tensorflow-import

from tf_dp.core import config as config_lib
from tf_dp.data import distributed as data_distributed
from tf_dp.data import lots as data_lots
from tf_dp.errors import SamplingMismatchError
from tf_dp.keras import fit_arguments
from tf_dp.keras import fit_distribution
from tf_dp.sampling import PrivacyUnit
from tf_dp.sampling import Sampling


def checked_arguments(model: Any, method: str, args: Sequence[Any],
                      kwargs: Dict[str, Any]) -> Dict[str, Any]:
  """The arguments of ``model.<method>(*args, **kwargs)`` by name, after
  ``check_sampling_of_fit_input`` passed their ``x`` (``method``: ``"fit"``
  or ``"train_on_batch"``; ``model.optimizer`` is a DP optimizer)."""
  bound = fit_arguments.keras_arguments(model, method, args, kwargs)
  engine = model.optimizer.dp_engine
  check_sampling_of_fit_input(engine.config, bound.get("x"),
                              engine.recorded_population_size(), call=method,
                              workers=fit_distribution.strategy_workers(model),
                              replicas=fit_distribution.strategy_replicas(model))
  return bound


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


# The samplers whose datasets hold the lots each declared sampling promises.
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
  distributed = data_distributed.distributed_declaration(x)
  declared = (data_lots.declared_sampling(x)
              if isinstance(x, tf.data.Dataset) else distributed)
  sampling = config.sampling
  name = config.caller.constructor  # The optimizer as the caller built it.
  redrawn = workers > 1 and (data_lots.lot_recipe(x) is not None
                             or distributed is not None)
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
