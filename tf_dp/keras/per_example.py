"""Per-example (or per-microbatch) gradients with ``tf.vectorized_map``.

The model is re-run on each record inside the mapped function (a forward and
a backward pass per record), which is O(batch) work, unlike the jacobian of
the loss vector (O(batch^2)). A record is one example, or one microbatch of
``batch_size / num_microbatches`` consecutive examples whose gradient is the
mean over its examples, or one user (``privacy_unit="user"``): the
``max_examples_per_user`` consecutive rows a user sampler gives each user,
whose gradient is the sum over the user's examples.

A batch with ``tf.RaggedTensor`` or ``tf.SparseTensor`` inputs (token ids of
varying length) is computed by a ``tf.map_fn`` loop instead: each record is
the example itself (or its microbatch), a batch of one that keeps its
composite type, so the model computes it from that example alone.
"""

from typing import (Any, Callable, FrozenSet, Iterable, List, NamedTuple,
                    Optional, Set, Tuple)

from absl import logging
import tensorflow as tf

from tf_dp.core.vectorized import gradients_or_zeros
from tf_dp.errors import SamplingMismatchError
from tf_dp.errors import UnsupportedModelError
from tf_dp.keras import model_checks


def is_masked_rnn(layer: Any, mask: Any = None) -> bool:
  """A recurrent layer called with a mask: pfor converts its TensorList
  loop into a program that fails at run time."""
  return hasattr(layer, "cell") and mask is not None


def pfor_breaks_recurrence(layers: Iterable[Any]) -> bool:
  """Whether a whole-model ``tf.vectorized_map`` may mis-convert a
  recurrent layer among ``layers``: pfor turns a recurrent layer's
  TensorList loop into a program that fails at run time ("Tried to append
  a tensor with incompatible shape to a list") in several measured cases
  (an Embedding, a mask, or a reshape of the examples' rows before it; on
  Keras 3 and tf-keras with TF 2.21), so every model with one takes the
  per-record loop."""
  return any(hasattr(layer, "cell") for layer in layers)


def is_composite(t: Any) -> bool:
  return isinstance(t, (tf.RaggedTensor, tf.SparseTensor))


def composite_inputs_reason(x: Any) -> Optional[str]:
  """Why a batch ``x`` takes the per-record loop (None if it is dense)."""
  kinds = sorted({type(t).__name__ for t in tf.nest.flatten(x)
                  if is_composite(t)})
  if not kinds:
    return None
  return (f"the inputs include a {' and a '.join(kinds)}, which the fast "
          f"path does not take (a tf.map_fn loop computes each example "
          f"alone, as a batch of one, instead of tf.vectorized_map)")


def batch_size(structure: Any) -> tf.Tensor:
  """The (dynamic) number of examples of a batch: its first leaf's rows."""
  t = tf.nest.flatten(structure)[0]
  if isinstance(t, tf.RaggedTensor):
    return tf.cast(t.nrows(), tf.int32)
  if isinstance(t, tf.SparseTensor):
    return tf.cast(t.dense_shape[0], tf.int32)
  return tf.shape(t)[0]


def _record(t: Any, i: Any) -> Any:
  """Record ``i`` of ``t`` split by ``split_into_records``, keeping its
  type. A sparse record's dense shape depends on that record alone: the
  static width where the input fixes it, else the record's own extent (its
  largest index + 1), never the widest example of the batch."""
  if not isinstance(t, tf.SparseTensor):
    return t[i]
  shape = t.dense_shape  # [records, examples per record, features...]
  start = tf.concat([[tf.cast(i, tf.int64)], tf.zeros_like(shape[1:])], 0)
  part = tf.sparse.reshape(
      tf.sparse.slice(t, start, tf.concat([[1], shape[1:]], 0)), shape[1:])
  extent = tf.reduce_max(tf.concat(
      [part.indices[:, 1:] + 1,
       tf.ones([1, tf.size(shape) - 2], tf.int64)], 0), axis=0)
  own = [shape[1]] + [
      extent[k] if d is None else tf.constant(d, tf.int64)
      for k, d in enumerate(t.shape[2:])]
  # Every index lies within the record's own extent.
  return tf.SparseTensor(part.indices, part.values, tf.stack(own))


def _loop_over_composite_records(fn: Callable[[Any], Any], elems: Any) -> Any:
  """``tf.map_fn`` over record indices; ``fn`` sees each record with its
  composite type (ragged ``[k, (len)]``, sparse ``[k, d]``)."""
  count = batch_size(elems)
  take = lambda i: fn(tf.nest.map_structure(lambda t: _record(t, i), elems))
  traced = tf.function(take, autograph=False).get_concrete_function(
      tf.TensorSpec([], tf.int32)).structured_outputs
  for t in tf.nest.flatten(traced):
    if is_composite(t):
      raise UnsupportedModelError(
          f"tf_dp: the model returns a {type(t).__name__}; with ragged or "
          f"sparse inputs tf_dp needs dense outputs and labels (pool or "
          f"reduce the sequence axis, or pad the outputs).")
  signature = tf.nest.map_structure(
      lambda t: tf.TensorSpec(t.shape, t.dtype), traced)
  return tf.map_fn(take, tf.range(count), fn_output_signature=signature)


def map_records(fn: Callable[[Any], Any], elems: Any,
                loop: bool = False) -> Any:
  """``fn`` applied to each record of ``elems``: ``tf.vectorized_map``, or
  a ``tf.map_fn`` loop when ``loop`` is set, when ``elems`` holds ragged or
  sparse tensors, or when pfor cannot convert the computation at all (e.g.
  tf-keras LSTM/GRU, whose TensorList variants pfor rejects). Both compute
  each record from that record alone.
  """
  if any(is_composite(t) for t in tf.nest.flatten(elems)):
    return _loop_over_composite_records(fn, elems)
  if not loop:
    try:
      return tf.vectorized_map(fn, elems, fallback_to_while_loop=True)
    except (TypeError, ValueError, NotImplementedError) as e:
      logging.log_first_n(
          logging.WARNING, "tf_dp: tf.vectorized_map cannot convert the "
          "per-record computation (%s); a tf.map_fn loop computes it "
          "instead (slower).", 1, str(e).splitlines()[-1][:200])
  record_spec = tf.nest.map_structure(
      lambda t: tf.TensorSpec(t.shape[1:], t.dtype), elems)
  traced = tf.function(fn, autograph=False).get_concrete_function(
      record_spec).structured_outputs
  signature = tf.nest.map_structure(
      lambda t: tf.TensorSpec(t.shape, t.dtype), traced)
  return tf.map_fn(fn, elems, fn_output_signature=signature)


def _examples_per_record(tensor: Any, num_microbatches: Any) -> tf.Tensor:
  """``batch / num_microbatches``, after checking that it divides."""
  message = (f"tf_dp: the batch size does not divide into num_microbatches"
             f"={num_microbatches}. Use a batch size that is a multiple of "
             f"num_microbatches and drop_remainder=True in tf.data (a short "
             f"last batch cannot be split into equal microbatches).")
  static_batch = tensor.shape[0]
  if (static_batch is not None and not tf.is_tensor(num_microbatches)
      and static_batch % num_microbatches):
    raise ValueError(message + f" Got a batch of {static_batch}.")
  batch = batch_size(tensor)
  with tf.control_dependencies([tf.debugging.assert_equal(
      batch % num_microbatches, 0, message=message)]):
    return tf.identity(batch // num_microbatches)


def divided_into_microbatches(batch: Any, num_microbatches: Any) -> Any:
  """``batch`` (a nest) whose dense tensors are read only once its size
  is known to divide into ``num_microbatches``: every computation of the
  step that reads the batch (a fast rule's reshape, the lot's counts and
  so its ledger sample) waits for the check, so a short last batch fails
  with tf_dp's message and leaves nothing recorded."""
  per_record = _examples_per_record(tf.nest.flatten(batch)[0],
                                    num_microbatches)
  with tf.control_dependencies([per_record]):
    return tf.nest.map_structure(
        lambda t: tf.identity(t) if isinstance(t, tf.Tensor) else t, batch)


def _split_composite(tensor: Any, num_microbatches: Any) -> Any:
  """A ragged batch as ``[records, k, (len)]``, a sparse one as ``[records,
  k, ...]``: records of k consecutive examples (k = 1 without
  microbatches)."""
  per_record = (1 if num_microbatches is None
                else _examples_per_record(tensor, num_microbatches))
  if isinstance(tensor, tf.RaggedTensor):
    return tf.RaggedTensor.from_uniform_row_length(
        tensor, tf.cast(per_record, tensor.row_splits.dtype))
  shape = tensor.dense_shape
  per_record = tf.cast(per_record, tf.int64)
  return tf.sparse.reshape(tensor, tf.concat(
      [[shape[0] // per_record, per_record], shape[1:]], 0))


def split_into_records(tensor: Any, num_microbatches: Any) -> Any:
  """Reshapes a batch to ``[records, examples_per_record, ...]``."""
  if is_composite(tensor):
    return _split_composite(tensor, num_microbatches)
  tensor = tf.convert_to_tensor(tensor)
  if num_microbatches is None:
    return tf.expand_dims(tensor, 1)
  per_record = _examples_per_record(tensor, num_microbatches)
  return tf.reshape(tensor, tf.concat(
      [[num_microbatches, per_record], tf.shape(tensor)[1:]], axis=0))


def user_records(tensor: tf.Tensor, max_examples_per_user: int) -> tf.Tensor:
  """The number of users of a batch laid out by a user sampler: each user's
  ``max_examples_per_user`` consecutive rows (padding rows of weight 0
  where the user has fewer examples). Asserts that the rows divide."""
  message = (f"tf_dp: privacy_unit='user' takes each user's "
             f"max_examples_per_user={max_examples_per_user} consecutive rows "
             f"as one record, and the batch's rows are not a multiple of it. "
             f"Feed lots of tf_dp.data.poisson_sampled_users or "
             f"fixed_size_sampled_users with the same max_examples_per_user.")
  static_batch = tensor.shape[0]
  if static_batch is not None and static_batch % max_examples_per_user:
    raise SamplingMismatchError(message +
                                f" Got a batch of {static_batch} rows.")
  batch = batch_size(tensor)
  with tf.control_dependencies([tf.debugging.assert_equal(
      batch % max_examples_per_user, 0, message=message)]):
    return tf.identity(batch // max_examples_per_user)


def record_loss(losses: tf.Tensor, record_reduction: str) -> tf.Tensor:
  """A record's loss from its examples' ``losses``: ``"mean"`` (an example
  or a microbatch) or ``"sum"`` (a user: the sum of the user's examples'
  gradients is the record's gradient)."""
  if record_reduction == "sum":
    return tf.reduce_sum(losses, -1)
  return tf.reduce_mean(losses, -1)


class RecordGradients(NamedTuple):
  """What ``record_gradients`` returns (see there)."""
  grads: List[tf.Tensor]
  y_pred: Any
  losses: tf.Tensor
  without_gradient: FrozenSet[int]


def record_gradients(model: Any, per_example_loss_fn: Callable[..., tf.Tensor],
                     x: Any, y: Any, sample_weight: Any,
                     num_microbatches: Optional[int] = None,
                     record_reduction: str = "mean") -> RecordGradients:
  """Gradients of each record's loss w.r.t. the trainable variables.

  Args:
    model: A Keras model.
    per_example_loss_fn: ``f(y_true, y_pred, sample_weight) -> [n]``
      weighted losses, one per example (``tf_dp.keras.losses``).
    x, y: The batch (nests of tensors with a leading batch axis).
    sample_weight: ``[batch]`` weights, a nest of them (one per output, as
      Keras passes them for several outputs), or None.
    num_microbatches: None for per-example records, else the number of
      records (of equal numbers of consecutive examples).
    record_reduction: ``"mean"`` (a record's loss is the mean of its
      examples' losses) or ``"sum"`` (user records).

  Returns:
    ``RecordGradients(grads, y_pred, losses, without_gradient)``: grads is
    a list (one per trainable variable) of ``[records, *var.shape]``
    tensors; ``y_pred`` the batch predictions, ``losses`` the ``[batch]``
    weighted per-example losses, and ``without_gradient`` the indices of the
    variables whose gradient ``tape.gradient`` gives as None (their rows in
    ``grads`` are zeros; the step leaves them out of the update, as Keras
    does).
  """
  variables = model.trainable_variables
  split = lambda t: split_into_records(t, num_microbatches)
  xs = tf.nest.map_structure(split, x)
  ys = tf.nest.map_structure(split, y)
  if sample_weight is None:
    sample_weight = tf.ones([batch_size(x)], tf.float32)
  ws = tf.nest.map_structure(lambda w: split(tf.cast(w, tf.float32)),
                             sample_weight)

  # Traced once: which gradients the tape gives as None (a structural fact).
  without_gradient: Set[int] = set()

  def one_record(
      args: Tuple[Any, Any, Any]) -> Tuple[List[tf.Tensor], Any, tf.Tensor]:
    xi, yi, wi = args
    with tf.GradientTape() as tape:
      pred = model(xi, training=True)
      losses = per_example_loss_fn(yi, pred, wi)
      loss = record_loss(losses, record_reduction)
    raw = tape.gradient(loss, variables)
    without_gradient.update(i for i, g in enumerate(raw) if g is None)
    return gradients_or_zeros(raw, variables), pred, losses

  grads, preds, losses = map_records(
      one_record, (xs, ys, ws),
      loop=pfor_breaks_recurrence(model_checks.all_layers(model)))
  merge = lambda t: tf.reshape(t, tf.concat([[-1], tf.shape(t)[2:]], 0))
  return RecordGradients(grads, tf.nest.map_structure(merge, preds),
                         merge(losses), frozenset(without_gradient))
