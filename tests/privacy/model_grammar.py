"""A grammar of small random Keras models and DP steps, for hypothesis.

A ``ModelSpec`` is an input kind, a chain of ``Block``s, a style
(functional or subclassed) and a loss; ``model_specs`` draws one whose
shapes fit, block after block. Blocks that keep examples apart
(``SEPARABLE``) include the layouts a per-example gradient rule can get
wrong although the model itself is separable: rows merged across the batch
axis (``rows_merge``: ``[B, T, F] -> [B*T, F]``, a Dense, and back), time-major
transposes (``time_major``: ``[T, B, F]``, a Dense, and back) and both at
once (``time_major_merge``). ``MIXERS`` mix examples: a batch statistic
(``batch_center``: x minus its mean over the batch axis), a non-trainable
running mean assigned from each batch (``running_mean``, written before or
after it is read), a custom gradient whose backward pass mixes the batch
(``mix_gradient``) and Keras's BatchNormalization. ``tests/privacy/
model_builder.py`` turns a spec into a Keras model; ``NeighbourData`` says
how to draw a batch D and its neighbour D'.

Every spec is a frozen dataclass with a short repr, so that the smallest
failing example hypothesis prints can be rebuilt by hand.
"""

import dataclasses
from typing import Optional, Tuple

from hypothesis import strategies as st

ACTIVATIONS = (None, "tanh", "relu")
# loss name -> (output units, label kind)
LOSSES = {
    "mse": (1, "real"), "mae": (2, "real"), "huber": (1, "real"),
    "sparse_categorical_crossentropy": (3, "class"),
    "binary_crossentropy": (1, "binary"), "hinge": (1, "binary"),
    "poisson": (1, "count"),
}
INPUT_SHAPES = {
    "vector": (6,),
    "sequence": (4, 3),
    "sequence_any_length": (None, 3),  # Fed 4 steps; traced with None.
    "image": (4, 4, 2),
    "tokens": (5,),
}
ANY_LENGTH_STEPS = 4
VOCABULARY = 7

SEPARABLE = (
    "dense", "conv1d", "conv2d", "layernorm", "groupnorm", "pool",
    "global_pool", "flatten", "reshape", "permute", "rnn", "shared_dense",
    "residual", "concat", "dropout", "rows_merge", "time_major",
    "time_major_merge", "masked", "embedding")
MIXERS = ("batch_center", "running_mean", "mix_gradient", "batch_norm")

Shape = Tuple[Optional[int], ...]


@dataclasses.dataclass(frozen=True)
class Block:
  """One step of the chain: ``kind``, a width (units, filters, groups, pool
  size: 0 if unused), an option (activation, variant) and a LoRA rank
  (Keras 3 Dense and Embedding; 0 for none)."""
  kind: str
  width: int = 0
  option: Optional[str] = None
  lora: int = 0

  def __repr__(self):
    parts = [repr(self.kind)]
    if self.width:
      parts.append(str(self.width))
    if self.option is not None:
      parts.append(repr(self.option))
    if self.lora:
      parts.append(f"lora={self.lora}")
    return f"Block({', '.join(parts)})"


@dataclasses.dataclass(frozen=True)
class ModelSpec:
  """A model: its input, its blocks (then a head: Flatten or global pooling
  to a vector, and a Dense sized for the loss), its style and loss."""
  input_kind: str
  blocks: Tuple[Block, ...]
  style: str   # functional | subclassed
  loss: str
  seed: int

  @property
  def input_shape(self) -> Shape:
    return INPUT_SHAPES[self.input_kind]

  @property
  def separable(self) -> bool:
    return all(b.kind in SEPARABLE for b in self.blocks)

  @property
  def has_dropout(self) -> bool:
    return any(b.kind == "dropout" for b in self.blocks)


@dataclasses.dataclass(frozen=True)
class NeighbourData:
  """How to draw D and D': ``batch`` rows (``users`` records of ``rows_per
  _user`` rows with privacy_unit="user", else one record per row), filled
  by ``mode``; D' replaces record ``replaced`` by one drawn by
  ``replacement_mode``. ``weights`` (one per row, zeros allowed) are D's
  sample weights (None: no sample weights); the replaced record's rows get
  ``replacement_weight``."""
  records: int
  rows_per_user: int   # 1: privacy_unit="example"
  mode: str
  replacement_mode: str
  replaced: int
  weights: Optional[Tuple[float, ...]]
  replacement_weight: float
  clip: float
  driver: str   # fit | private_step | signature
  seed: int

  @property
  def batch(self) -> int:
    return self.records * self.rows_per_user

  @property
  def privacy_unit(self) -> str:
    return "user" if self.rows_per_user > 1 else "example"


DATA_MODES = ("normal", "huge", "tiny", "cancel", "equal", "zeros",
              "sparse", "constant", "huge_constant")
DRIVERS = ("fit", "private_step", "signature")


def _activation(draw):
  return draw(st.sampled_from(ACTIVATIONS))


def is_static(shape):
  return all(d is not None for d in shape)


def _divisors(n):
  return [d for d in range(1, n + 1) if n % d == 0]


def applicable_kinds(shape: Shape, masked_ok: bool = True):
  """The separable block kinds that accept a float tensor of ``shape``
  (without its batch axis)."""
  rank = len(shape)
  kinds = ["layernorm", "groupnorm", "dropout"]
  if rank <= 2:
    # Not on images: a rank-4 x rank-2 matmul is the pattern TF 2.21's
    # oneDNN kernels can corrupt (tensorflow#117700), a TensorFlow bug
    # that would crash the process rather than test the gate.
    kinds += ["dense", "residual", "concat", "shared_dense"]
  if rank == 1 and shape[0] % 2 == 0:
    kinds.append("reshape")
  if rank == 2:
    kinds += ["conv1d", "pool", "global_pool", "rnn", "rows_merge",
              "time_major", "time_major_merge"]
    if masked_ok:
      kinds.append("masked")
  if rank == 3:
    kinds += ["conv2d", "pool", "global_pool", "reshape", "permute"]
  if rank >= 2 and is_static(shape):
    kinds.append("flatten")
    if rank == 2:
      kinds.append("permute")
  return kinds


def output_shape(block: Block, shape: Shape) -> Shape:
  """The shape (without batch axis) after ``block``."""
  kind, width = block.kind, block.width
  if kind in MIXERS or kind in ("layernorm", "groupnorm", "dropout",
                                "residual", "shared_dense"):
    return shape
  if kind in ("dense", "rows_merge", "time_major", "time_major_merge",
              "conv1d", "conv2d"):
    if kind == "conv1d" and block.option == "valid":
      return (shape[0] - 1, width)
    return shape[:-1] + (width,)
  if kind == "concat":
    return shape[:-1] + (shape[-1] + width,)
  if kind == "pool":
    return tuple(None if d is None else d // 2 for d in shape[:-1]) + (
        shape[-1],)
  if kind == "global_pool":
    return (shape[-1],)
  if kind == "flatten":
    size = 1
    for d in shape:
      size *= d
    return (size,)
  if kind == "reshape":
    if len(shape) == 1:
      return (2, shape[0] // 2)
    return (shape[0] * shape[1], shape[2])
  if kind == "permute":
    return (shape[1], shape[0]) + shape[2:]
  if kind == "rnn":
    return (shape[0], width) if block.option == "sequences" else (width,)
  if kind in ("masked", "embedding"):
    if kind == "embedding" and block.option == "plain":
      return (shape[0], width)
    return (width,)
  raise ValueError(f"unknown block kind {kind!r}")


@st.composite
def separable_block(draw, shape: Shape, keras3: bool, masked_ok=True):
  """A separable block that accepts ``shape``."""
  kind = draw(st.sampled_from(applicable_kinds(shape, masked_ok)))
  width = lambda: draw(st.integers(1, 4))
  lora = lambda: draw(st.sampled_from([0, 0, 1, 2])) if keras3 else 0
  if kind == "dense":
    return Block(kind, width(), _activation(draw), lora())
  if kind in ("rows_merge", "time_major", "time_major_merge", "concat"):
    return Block(kind, width())
  if kind == "conv1d":
    valid = shape[0] is not None and shape[0] >= 2 and draw(st.booleans())
    return Block(kind, width(), "valid" if valid else "same")
  if kind == "conv2d":
    return Block(kind, width(), _activation(draw))
  if kind == "groupnorm":
    return Block(kind, draw(st.sampled_from(_divisors(shape[-1]))))
  if kind == "pool":
    if any(d is not None and d < 2 for d in shape[:-1]):
      return Block("layernorm")
    return Block(kind, 2, draw(st.sampled_from(["max", "average"])))
  if kind == "global_pool":
    return Block(kind, 0, draw(st.sampled_from(["max", "average"])))
  if kind == "dropout":
    return Block(kind, 0, draw(st.sampled_from(["0.2", "0.5"])))
  if kind == "rnn":
    return Block(kind, width(), draw(st.sampled_from(["last", "sequences"])))
  if kind == "masked":
    return Block(kind, width(), draw(st.sampled_from(["rnn", "average"])))
  if kind in ("shared_dense", "residual"):
    return Block(kind, 0, draw(st.sampled_from(["tanh", "relu"])))
  return Block(kind)


@st.composite
def mixer_block(draw):
  kind = draw(st.sampled_from(MIXERS))
  if kind == "running_mean":
    return Block(kind, 0, draw(st.sampled_from(["write_then_read",
                                                "read_then_write"])))
  return Block(kind)


@st.composite
def model_specs(draw, keras3: bool, mixers: bool, max_blocks: int = 4):
  """A ``ModelSpec``: separable blocks only, or (``mixers``) with one or
  two mixing blocks inserted at random places."""
  input_kind = draw(st.sampled_from(sorted(INPUT_SHAPES)))
  shape = INPUT_SHAPES[input_kind]
  blocks = []
  if input_kind == "tokens":
    blocks.append(Block("embedding", draw(st.integers(1, 4)),
                        draw(st.sampled_from(["plain", "mask_rnn",
                                              "mask_average"])),
                        draw(st.sampled_from([0, 1])) if keras3 else 0))
    shape = output_shape(blocks[0], shape)
  for _ in range(draw(st.integers(1, max_blocks))):
    block = draw(separable_block(shape, keras3))
    blocks.append(block)
    shape = output_shape(block, shape)
  if mixers:
    first = 1 if input_kind == "tokens" else 0  # Not on integer ids.
    for _ in range(draw(st.integers(1, 2))):
      blocks.insert(draw(st.integers(first, len(blocks))),
                    draw(mixer_block()))
  return ModelSpec(input_kind, tuple(blocks),
                   draw(st.sampled_from(["functional", "subclassed"])),
                   draw(st.sampled_from(sorted(LOSSES))),
                   draw(st.integers(0, 2 ** 16)))


@st.composite
def neighbour_data(draw, users: bool = True):
  """A ``NeighbourData``; with ``users``, privacy_unit="user" (2 or 3 rows
  per user, custom-loop drivers only) is drawn a quarter of the time."""
  driver = draw(st.sampled_from(DRIVERS))
  rows_per_user = 1
  if users and driver != "fit" and draw(st.integers(0, 3)) == 0:
    rows_per_user = draw(st.sampled_from([2, 3]))
  records = draw(st.integers(2, 5))
  weights = None
  if draw(st.booleans()):
    weights = tuple(draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 3.0]),
                                  min_size=records * rows_per_user,
                                  max_size=records * rows_per_user)))
  return NeighbourData(
      records=records, rows_per_user=rows_per_user,
      mode=draw(st.sampled_from(DATA_MODES)),
      replacement_mode=draw(st.sampled_from(DATA_MODES)),
      replaced=draw(st.integers(0, records - 1)),
      weights=weights,
      replacement_weight=draw(st.sampled_from([0.0, 1.0, 3.0])),
      clip=draw(st.sampled_from([0.01, 0.3, 3.0])),
      driver=driver, seed=draw(st.integers(0, 2 ** 16)))
