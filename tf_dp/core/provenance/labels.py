"""What a tensor of a traced step may depend on, row by row.

A label says how a tensor depends on the batch's examples:

* ``PUBLIC``: on none of them (weights, constants, shapes, random draws);
* ``Rows(axis, group)``: axis ``axis`` indexes the examples in batch
  order, ``group`` consecutive entries each (a ``Monomial``: a positive
  integer times a product of symbols, since sizes are often unknown when
  tracing; None: unknown),
  and the entries of example ``i`` depend on example ``i`` and public
  tensors alone;
* ``Interleaved(axis, outer)``: rows by example, ``outer`` times over
  (example ``i``'s rows are ``k * N + i``);
* ``ListOf(element)``: a ``TensorList`` whose elements all carry
  ``element``;
* ``Mixed(...)``: anything else: an entry may depend on several examples.
  ``proven`` says that a known operation combined different examples (a
  reduction over the batch axis, say); otherwise the analysis could not
  show that it does not (an operation it does not know).

``Rows`` is closed under the operations ``tf_dp.core.provenance.op_rules``
lists: applied to such inputs they give such outputs. Everything else is
``Mixed``. Pure Python.
"""

import collections
import dataclasses
from typing import Iterable, Optional, Tuple, Union

# The symbol of the number of examples in a batch.
EXAMPLES = "N"


@dataclasses.dataclass(frozen=True)
class Monomial:
  """``coefficient * product(symbols)``: a positive size (``coefficient``
  -1 stands for a reshape's inferred ``-1``)."""
  coefficient: int
  symbols: Tuple[str, ...] = ()

  def __mul__(self, other: "Monomial") -> "Monomial":
    return Monomial(self.coefficient * other.coefficient,
                    tuple(sorted(self.symbols + other.symbols)))

  def divided_by(self, other: "Monomial") -> Optional["Monomial"]:
    """``self / other`` if it is a monomial with an integer coefficient."""
    if other.coefficient <= 0 or self.coefficient % other.coefficient:
      return None
    left = collections.Counter(self.symbols)
    left.subtract(collections.Counter(other.symbols))
    if any(count < 0 for count in left.values()):
      return None
    return Monomial(self.coefficient // other.coefficient,
                    tuple(sorted(left.elements())))

  def with_examples(self, examples: Optional[int]) -> "Monomial":
    """The size for a batch of ``examples`` examples (unchanged if None)."""
    if examples is None or EXAMPLES not in self.symbols:
      return self
    count = self.symbols.count(EXAMPLES)
    return Monomial(self.coefficient * examples ** count,
                    tuple(s for s in self.symbols if s != EXAMPLES))

  @property
  def is_one(self) -> bool:
    return self.coefficient == 1 and not self.symbols

  @property
  def counts_examples(self) -> bool:
    return EXAMPLES in self.symbols and self.coefficient > 0


ONE = Monomial(1)
Size = Optional[Monomial]


def product(sizes: Iterable[Size]) -> Size:
  """The product of positive sizes (None if one is unknown or -1)."""
  total = ONE
  for size in sizes:
    if size is None or size.coefficient <= 0:
      return None
    total = total * size
  return total


@dataclasses.dataclass(frozen=True)
class Public:
  """Depends on no example."""

  def __repr__(self):
    return "PUBLIC"


PUBLIC = Public()


@dataclasses.dataclass(frozen=True)
class Rows:
  """Axis ``axis`` indexes the examples, ``group`` entries each (a size:
  ``Monomial``, None if unknown), in batch order; example ``i``'s entries
  depend on example ``i`` alone."""
  axis: int
  group: Size = ONE


@dataclasses.dataclass(frozen=True)
class Interleaved:
  """Axis ``axis`` holds ``outer`` blocks of one row per example each, in
  batch order (``SpaceToBatchND``, as dilated convolutions use it): row
  ``k * N + i`` depends on example ``i`` alone."""
  axis: int
  outer: Monomial


@dataclasses.dataclass(frozen=True)
class ListOf:
  """A ``TensorList`` whose every element carries ``element``."""
  element: "Label"


@dataclasses.dataclass(frozen=True)
class Mixed:
  """An entry may depend on several examples.

  ``op`` and ``op_type`` name the operation where separation was lost,
  ``reason`` says how, and ``proven`` whether that operation certainly
  combines examples (else the analysis only failed to show it does not).
  """
  op: str
  op_type: str
  reason: str
  proven: bool = False


Label = Union[Public, Rows, Interleaved, ListOf, Mixed]


def is_separable(label: Label) -> bool:
  """Whether ``label`` keeps examples apart (public, or rows by example)."""
  return label is PUBLIC or isinstance(label, (Rows, Interleaved)) or (
      isinstance(label, ListOf) and is_separable(label.element))


def first_mixed(*labels: Label) -> Optional[Mixed]:
  """The first ``Mixed`` among ``labels`` (inside lists too), preferring a
  proven one; None if all are separable."""
  found = None
  for label in labels:
    while isinstance(label, ListOf):
      label = label.element
    if isinstance(label, Mixed):
      if label.proven:
        return label
      found = found or label
  return found


def join(a: Label, b: Label, op: str = "", op_type: str = "") -> Label:
  """A label that holds for a tensor that may carry ``a`` or ``b`` (two
  branches of a conditional, a loop variable before and after its body).

  A public tensor is a degenerate ``Rows`` of any layout, so it joins with
  one; two ``Rows`` join only if they agree.
  """
  if a == b:
    return a
  mixed = first_mixed(a, b)
  if mixed is not None:
    return mixed
  if a is PUBLIC:
    return b
  if b is PUBLIC:
    return a
  if isinstance(a, ListOf) and isinstance(b, ListOf):
    element = join(a.element, b.element, op, op_type)
    return element if isinstance(element, Mixed) else ListOf(element)
  if isinstance(a, Rows) and isinstance(b, Rows) and a.axis == b.axis:
    if a.group is None or b.group is None or a.group == b.group:
      return Rows(a.axis, a.group if a.group == b.group else None)
  return Mixed(op, op_type, f"values laid out differently ({a} and {b}) "
               f"meet", proven=False)
