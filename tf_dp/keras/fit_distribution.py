"""A model's ``tf.distribute`` strategy, and ``fit``'s sampler lots over a
strategy that spans several workers."""

from typing import Any, Dict, Tuple

from tf_dp.data import distributed as data_distributed
from tf_dp.data import lots as data_lots
from tf_dp.dp_query import strategy_context


def strategy_workers(model: Any) -> int:
  """The hosts (chief and workers) ``model``'s distribution strategy spans;
  1 without a multi-worker strategy."""
  return strategy_context.strategy_workers(
      getattr(model, "distribute_strategy", None))


def strategy_replicas(model: Any) -> int:
  """The replicas in sync of ``model``'s distribution strategy (1 without
  one)."""
  strategy = getattr(model, "distribute_strategy", None)
  return getattr(strategy, "num_replicas_in_sync", 1) or 1


def redrawn_per_worker(model: Any, args: Tuple[Any, ...],
                       kwargs: Dict[str, Any]
                       ) -> Tuple[Tuple[Any, ...], Dict[str, Any]]:
  """``fit``'s arguments with a sampler's dataset replaced by
  ``tf_dp.data.distribute_lots`` of it when ``model``'s strategy spans
  several workers (each worker then reads its replicas' parts of the same
  global lots, drawn afresh for every epoch); unchanged otherwise. Keras
  reads a distributed dataset for ``steps_per_epoch`` steps: by default
  the sampler's batches.

  Privacy contract: see ``tf_dp.data.distribute_lots``: the lots the
  ledger records are the sampler's, one global lot per step.
  """
  if strategy_workers(model) <= 1:
    return args, kwargs
  from_args = bool(args)
  x = args[0] if from_args else kwargs.get("x")
  recipe = data_lots.lot_recipe(x)
  if recipe is None:
    return args, kwargs
  distributed = data_distributed.distribute_lots(model.distribute_strategy,
                                                 x, passes=None)
  if kwargs.get("steps_per_epoch") is None:
    kwargs = dict(kwargs, steps_per_epoch=recipe.batches)
  if from_args:
    return (distributed,) + args[1:], kwargs
  return args, dict(kwargs, x=distributed)
