"""Record what each trainable layer sees and produces in one batched forward.

``TapSession`` patches ``call`` on the instances of the given layers for the
duration of a ``with`` block. A layer with a rule whose ``pre_activation`` is
true is run with its activation switched off, so the recorded output is the
pre-activation ``z`` (its gradient is what ghost norms need); the activation
is then applied outside. Every other layer records its inputs and outputs as
they are, plus the call arguments, so that its per-record gradients can be
recomputed locally.

``outside_reads`` gives a tape that sees the variables read outside the
tapped calls, and collects in ``reads`` those read inside each tapped call:
a variable read outside the call of the layer holding it (a layer reading
its sublayer's kernel directly, or another layer's weights) would have
gradient terms no tap of its own layer records.
"""

import contextlib
from typing import (Any, Callable, Dict, Iterator, List, Literal, Optional,
                    Sequence, Tuple)

import tensorflow as tf


class Tap:
  """What one call of one layer recorded: ``reads`` lists the variables the
  call read (None when not recorded, outside ``outside_reads``)."""

  def __init__(self, layer: Any, args: Any, kwargs: Dict[str, Any], output: Any,
               reads: Optional[List[Any]] = None) -> None:
    self.layer = layer
    self.args = args
    self.kwargs = kwargs
    self.output = output
    self.reads = reads


class TapSession:
  """Context manager: patch the layers' ``call`` and collect their taps."""

  def __init__(self, layers: Sequence[Any],
               pre_activation: Dict[int, bool]) -> None:
    self._layers = layers
    self._pre_activation = pre_activation
    self.taps: Dict[int, Tap] = {}  # The last call's tap, by layer id.
    # Every call's tap, in call order, by layer id.
    self.all_taps: Dict[int, List[Tap]] = {}
    self.call_counts: Dict[int, int] = {}
    self._originals: Dict[int, Tuple[Callable[..., Any], bool]] = {}
    self._outside: Any = None
    self._watcher: Any = None
    # Variables read inside each layer's calls, by layer id.
    self.reads: Dict[int, List[Any]] = {}

  @contextlib.contextmanager
  def outside_reads(self) -> Iterator[Any]:
    """A tape that watches the variables read outside the tapped calls
    (``watched_variables()``) while the block runs."""
    with tf.GradientTape() as tape:
      self._outside = self._watcher = tape
      try:
        yield tape
      finally:
        self._outside = self._watcher = None

  def _record(self, layer: Any, tap: Tap) -> None:
    self.taps[id(layer)] = tap
    self.all_taps.setdefault(id(layer), []).append(tap)

  def _run(self, layer: Any, original: Callable[..., Any], args: Any,
           kwargs: Dict[str, Any]) -> Tuple[Any, Optional[List[Any]]]:
    """``(output, variables read)`` of the layer's call; under
    ``outside_reads``, the variables it reads are also collected in
    ``reads`` (not in the tape of the enclosing code, or of an enclosing
    tapped call); otherwise the variables read are None (not recorded)."""
    if self._outside is None:
      return original(*args, **kwargs), None
    enclosing = self._watcher
    with enclosing.stop_recording():
      with tf.GradientTape() as watcher:
        self._watcher = watcher
        try:
          output = original(*args, **kwargs)
        finally:
          self._watcher = enclosing
          call_reads = list(watcher.watched_variables())
          self.reads.setdefault(id(layer), []).extend(call_reads)
    return output, call_reads

  def _make_call(self, layer: Any,
                 original: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
      self.call_counts[id(layer)] = self.call_counts.get(id(layer), 0) + 1
      if self._pre_activation.get(id(layer)):
        activation = layer.activation
        layer.activation = None
        try:
          z, reads = self._run(layer, original, args, kwargs)
        finally:
          layer.activation = activation
        self._record(layer, Tap(layer, args, kwargs, z, reads))
        return z if activation is None else activation(z)
      out, reads = self._run(layer, original, args, kwargs)
      self._record(layer, Tap(layer, args, kwargs, out, reads))
      return out
    return call

  def original_call(self, layer: Any) -> Tuple[Callable[..., Any], bool]:
    return self._originals[id(layer)]

  def __enter__(self) -> "TapSession":
    for layer in self._layers:
      had_instance_call = "call" in layer.__dict__
      original = layer.call
      self._originals[id(layer)] = (original, had_instance_call)
      layer.call = self._make_call(layer, original)
    return self

  def __exit__(self, *exc: Any) -> Literal[False]:
    for layer in self._layers:
      original, had_instance_call = self._originals[id(layer)]
      if had_instance_call:
        layer.call = original
      else:
        del layer.call
    return False


def tensors_of(tap: Tap) -> List[tf.Tensor]:
  """The tap's positional tensor inputs (a flat list)."""
  return [a for a in tf.nest.flatten(tap.args) if tf.is_tensor(a)]
