"""Whether a ``tf.data`` pipeline's batches are a fresh random shuffle.

``fit`` under ``sampling="shuffled"`` records every batch as a random
sample of B of the n examples. ``batch_order`` reads a dataset's graph
(the serialized graph of its variant tensor, ``_as_serialized_graph``) to
tell whether that holds: walking from the output towards the source, the
first batching op must read, through ops that keep the rows and their
order (map, filter, prefetch, take, repeat, ...), a shuffle of the rows
that

* reshuffles every epoch (``reshuffle_each_iteration`` True: a shuffle
  drawn once gives every epoch the same batches, a fixed order);
* holds the whole pass in its buffer (``buffer_size >= n``: a smaller
  buffer only moves an example a buffer's length, so its batch is not a
  uniform sample; a buffer of 1 shuffles nothing);
* reads one pass, not a repeated stream (a ``repeat`` below the shuffle
  mixes passes in its buffer, and a batch may hold an example twice);
* is batched pass by pass: a ``repeat`` between the shuffle and the
  batching makes a batch that straddles two passes, which may hold an
  example twice, unless the n examples divide into batches of B.

A batch of at least n rows holds every example whatever the order (its
lot is recorded with q = 1, nothing amplified) and counts too, as do the
elements of ``Dataset.from_tensors`` of the n examples, passed unchanged.

A shuffle after the batching (``.batch(B).shuffle(k)``) only shuffles the
order of fixed batches: an example is always with the same B - 1 others,
so no batch is a random sample of the n, and it does not count. A
``cache`` between the shuffle and the batching replays the first epoch's
order, and does not count either. A shuffle with a fixed seed (its own, or
derived from ``tf.random.set_seed``) counts, as a seeded sampler does,
and is reported (``seed``) so that ``fit`` can warn: whoever knows the
seed knows every batch. Anything else (a generator, a source read in
order, an op this module does not know between the batching and the
shuffle) is not shown random.
"""

from typing import Dict, List, NamedTuple, Optional, Tuple

import tensorflow as tf
from tensorflow.core.framework import graph_pb2  # pylint: disable=g-direct-tensorflow-import

_BATCH_OPS = frozenset({
    "BatchDataset", "BatchDatasetV2", "PaddedBatchDataset",
    "PaddedBatchDatasetV2", "ParallelBatchDataset", "MapAndBatchDataset"})
_SHUFFLE_OPS = frozenset({
    "ShuffleDataset", "ShuffleDatasetV2", "ShuffleDatasetV3",
    "ShuffleAndRepeatDataset", "ShuffleAndRepeatDatasetV2"})
# Ops that keep the rows they pass and their order (a subset, or repeated
# passes of the same order), so a shuffle below them still shuffles the
# rows the batching reads.
_ROW_OPS = frozenset({
    "MapDataset", "ParallelMapDataset", "ParallelMapDatasetV2",
    "FilterDataset", "PrefetchDataset", "TakeDataset", "SkipDataset",
    "RepeatDataset", "OptionsDataset", "ModelDataset",
    "MaxIntraOpParallelismDataset", "PrivateThreadPoolDataset",
    "AssertCardinalityDataset", "IgnoreErrorsDataset",
    "AssertNextDataset", "NonSerializableDataset"})
# Sources that give their rows in a fixed order.
_SOURCE_OPS = frozenset({
    "TensorSliceDataset", "TensorDataset", "RangeDataset",
    "TFRecordDataset", "TFRecordDatasetV2", "TextLineDataset",
    "FixedLengthRecordDatasetV2", "SparseTensorSliceDataset"})
_DT_RESOURCE = 20


class BatchOrder(NamedTuple):
  """What ``batch_order`` found.

  Attributes:
    random: Whether every epoch's batches are drawn from a fresh shuffle of
      all the rows (the rules of the module docstring).
    reason: Why not (for a message); empty when ``random``.
    seed: The shuffle's fixed seeds ``(seed, seed2)``, or None (fresh
      entropy).
  """
  random: bool
  reason: str
  seed: Optional[Tuple[int, int]] = None


class _Graph:
  """The nodes of a dataset's serialized graph, by name, and its consts."""

  def __init__(self, dataset: tf.data.Dataset) -> None:
    graph = graph_pb2.GraphDef()
    graph.ParseFromString(dataset._as_serialized_graph().numpy())  # pylint: disable=protected-access
    self.nodes = {node.name: node for node in graph.node}
    self.consts: Dict[str, object] = {
        node.name: tf.make_ndarray(node.attr["value"].tensor)
        for node in graph.node if node.op == "Const"
        and node.attr["value"].tensor.dtype != _DT_RESOURCE}
    self.output = next((n for n in graph.node if n.op == "_Retval"), None)

  def input_node(self, node, index=0):
    if len(node.input) <= index:
      return None
    return self.nodes.get(node.input[index].split(":")[0].lstrip("^"))

  def const(self, node, index):
    if len(node.input) <= index:
      return None
    return self.consts.get(node.input[index].split(":")[0])

  def chain(self, node) -> List:
    """``node`` and the single-input dataset ops below it, outermost
    first, down to the first op that is not a single-input row op."""
    out = []
    while node is not None:
      out.append(node)
      if node.op not in _ROW_OPS | _SHUFFLE_OPS | _BATCH_OPS:
        break
      node = self.input_node(node)
    return out


def batch_order(dataset: tf.data.Dataset,
                population_size: Optional[int]) -> BatchOrder:
  """Whether ``dataset``'s batches are a fresh random shuffle of its rows
  every epoch (module docstring).

  Args:
    dataset: The ``tf.data.Dataset`` given to ``fit``.
    population_size: n, the examples a pass holds (the optimizer's), or
      None when not known yet (the buffer is then not checked: ``fit``
      refuses a pipeline without n anyway).

  Returns:
    A ``BatchOrder`` (``random`` also when a batch holds all n rows).
  """
  graph = _Graph(dataset)
  chain = graph.chain(graph.input_node(graph.output)
                      if graph.output is not None else None)
  batch_at = next((i for i, n in enumerate(chain) if n.op in _BATCH_OPS),
                  None)
  if batch_at is None:
    if _whole_data_elements(chain, population_size):
      return BatchOrder(True, "", None)  # Every batch is all n: q = 1.
    return BatchOrder(False, "it batches nothing that tf_dp can read (its "
                      "batches come as they are, e.g. from a generator or "
                      "pre-batched tensors)")
  batch_size = graph.const(chain[batch_at], 1)
  if (population_size is not None and batch_size is not None
      and int(batch_size) >= population_size):
    return BatchOrder(True, "", None)  # Every batch is all n: q = 1.
  shuffled_batches = any(n.op in _SHUFFLE_OPS for n in chain[:batch_at])
  repeated = False
  for node in chain[batch_at + 1:]:
    repeated = repeated or node.op == "RepeatDataset"
    if node.op in _SHUFFLE_OPS:
      if (repeated or node.op.startswith("ShuffleAndRepeat")) and not (
          _passes_fill_batches(population_size, batch_size)):
        return BatchOrder(False, "it repeats its shuffled rows before "
                          "batching them, and a pass of n = "
                          f"{population_size} examples does not divide "
                          f"into batches of {batch_size}: a batch across "
                          "two passes may hold an example twice")
      return _shuffle_order(graph, node, population_size)
    if node.op.startswith("Cache"):
      return BatchOrder(False, "a cache between its shuffle and its "
                        "batching replays the first epoch's order")
    if node.op not in _ROW_OPS:
      break
  if shuffled_batches:
    return BatchOrder(False, "its shuffle comes after the batching, which "
                      "shuffles the order of fixed batches: each example is "
                      "always in the same batch")
  last = chain[-1].op
  if last not in _SOURCE_OPS and last not in _ROW_OPS | _BATCH_OPS:
    return BatchOrder(False, f"it batches what a {last} op gives, with no "
                      f"shuffle of the examples between them")
  return BatchOrder(False, "it batches its rows in the order they come (no "
                    "shuffle of the examples before .batch)")


# Ops that pass whole elements unchanged (or fewer of them).
_ELEMENT_OPS = frozenset({
    "RepeatDataset", "PrefetchDataset", "OptionsDataset", "ModelDataset",
    "TakeDataset", "MaxIntraOpParallelismDataset",
    "PrivateThreadPoolDataset"})


def _whole_data_elements(chain, population_size):
  """Whether ``chain`` gives ``Dataset.from_tensors`` elements of at least
  n rows each, unchanged (repeated, prefetched): every batch is all n."""
  if population_size is None or not chain:
    return False
  source = chain[-1]
  if source.op != "TensorDataset" or any(
      node.op not in _ELEMENT_OPS for node in chain[:-1]):
    return False
  shapes = source.attr["output_shapes"].list.shape
  return bool(shapes) and all(
      len(shape.dim) > 0 and shape.dim[0].size >= population_size
      for shape in shapes)


def _passes_fill_batches(population_size, batch_size):
  """Whether passes of n rows end where batches of B end (n % B == 0)."""
  return (population_size is not None and batch_size is not None
          and population_size % int(batch_size) == 0)


def _shuffle_order(graph, node, population_size):
  """The ``BatchOrder`` of a shuffle of the rows the batching reads."""
  if "reshuffle_each_iteration" in node.attr and not (
      node.attr["reshuffle_each_iteration"].b):
    return BatchOrder(False, "its shuffle has reshuffle_each_iteration="
                      "False: every epoch takes the same batches")
  buffer_size = graph.const(node, 1)
  if buffer_size is None:
    return BatchOrder(False, "its shuffle's buffer_size cannot be read")
  if population_size is not None and int(buffer_size) < population_size:
    return BatchOrder(False, f"its shuffle buffer holds {int(buffer_size)} "
                      f"of the n = {population_size} examples: an example "
                      f"moves at most a buffer's length, so no batch is a "
                      f"uniform sample of the n")
  below = graph.chain(graph.input_node(node))
  if any(n.op == "RepeatDataset" for n in below):
    return BatchOrder(False, "it repeats the rows before shuffling them: "
                      "the buffer mixes passes, and a batch may hold an "
                      "example twice")
  seeds = (graph.const(node, 2), graph.const(node, 3))
  seed = None
  if node.op != "ShuffleDatasetV2" and all(s is not None for s in seeds):
    if any(int(s) for s in seeds):
      seed = (int(seeds[0]), int(seeds[1]))
  return BatchOrder(True, "", seed)
