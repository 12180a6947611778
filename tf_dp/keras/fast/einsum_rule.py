"""Rule for keras.layers.EinsumDense (and so MultiHeadAttention's parts).

The layer computes ``z = einsum(equation, x, kernel) + bias``. Its letters
fall into classes: the batch letter (first of the input), positions (input
and output, not kernel), contracted features K (input and kernel), output
features C (kernel and output), groups G (all three) and letters summed
out of the input alone. Per record and group the kernel gradient is then
``A^T G`` with rank-3 rows ``A`` = [positions, K] and ``G`` = [positions, C]
(``linear.py``), so no rank-4 x rank-2 matmul is ever built; the clipped
sum is one einsum ``input, output -> kernel`` on scaled output gradients.

LoRA (``enable_lora``, Keras 3) on EinsumDense and Dense: each factor's
gradient is the kernel gradient of an einsum derived from the layer's
(``LoraFactors``), so the same rows and certificates serve.
"""

import dataclasses
import string
from typing import Any, List, Optional, Sequence, Tuple, cast

import tensorflow as tf

from tf_dp.keras.fast import linear
from tf_dp.keras.fast import rule_types

# An einsum's ``(input, kernel, output)`` letter strings.
Specs = Tuple[str, str, str]
# Grouped rows ``(a, g)`` of a kernel gradient (``linear.py``).
Rows = Tuple[tf.Tensor, tf.Tensor]


def parse_equation(equation: str, input_rank: int) -> Optional[Specs]:
  """``(input, kernel, output)`` letter strings with ``...`` spelled out,
  or None if the equation has a form this rule does not handle."""
  equation = equation.replace(" ", "")
  try:
    lhs, out = equation.split("->")
    inp, ker = lhs.split(",")
  except ValueError:
    return None
  if "..." in ker:
    return None
  if "..." in inp:
    elided = input_rank - (len(inp) - 3)
    if elided < 0 or "..." not in out:
      return None
    used = set(inp + ker + out)
    fill = "".join([c for c in string.ascii_letters if c not in used][:elided])
    inp, out = inp.replace("...", fill), out.replace("...", fill)
  for spec in (inp, ker, out):
    if len(set(spec)) != len(spec) or not spec.isalpha():
      return None
  if (len(inp) != input_rank or inp[0] not in out or inp[0] in ker
      or any(c not in inp and c not in out for c in ker)):
    return None
  return inp, ker, out


def letter_classes(inp: str, ker: str,
                   out: str) -> Tuple[str, str, str, str, str]:
  """``(batch, positions, groups, contracted, features)`` letter strings."""
  batch = inp[0]
  positions = "".join(c for c in inp[1:] if c in out and c not in ker)
  groups = "".join(c for c in inp if c in ker and c in out)
  contracted = "".join(c for c in inp if c in ker and c not in out)
  features = "".join(c for c in ker if c in out and c not in inp)
  return batch, positions, groups, contracted, features


def _size(shape: Sequence[int], ker: str, letters: str) -> int:
  size = 1
  for c in letters:
    size *= shape[ker.index(c)]
  return size


def einsum_rows(specs: Specs, kernel_shape: Sequence[int], x: tf.Tensor,
                g: tf.Tensor, records: linear.Records) -> Rows:
  """Grouped rows ``(a, g)`` (``linear.py``) of the kernel gradient of
  ``z = einsum(inp,ker->out, x, kernel)`` for parsed ``specs``."""
  inp, ker, out = specs
  batch, positions, groups, contracted, features = letter_classes(
      inp, ker, out)
  n_groups = _size(kernel_shape, ker, groups)
  a = tf.einsum(f"{inp}->{batch}{positions}{groups}{contracted}", x)
  a = tf.reshape(a, [tf.shape(x)[0], -1, n_groups,
                     _size(kernel_shape, ker, contracted)])
  g = tf.einsum(f"{out}->{batch}{positions}{groups}{features}", g)
  g = tf.reshape(g, [tf.shape(g)[0], -1, n_groups,
                     _size(kernel_shape, ker, features)])
  return linear.grouped_rows(a, records), linear.grouped_rows(g, records)


def lora_specs(specs: Specs) -> Optional[Tuple[Specs, Specs, str]]:
  """``(down, up, back)`` of a LoRA kernel ``k = k0 + s a b``, ``a`` of
  shape ``k.shape[:-1] + (rank,)`` and ``b`` of ``(rank, k.shape[-1])``:
  parsed specs of ``h = einsum(x, a)`` and ``z = einsum(h, b)``, and the
  equation of ``g b^T`` (``out`` with the last kernel letter replaced by
  the rank letter). None unless the last kernel letter is an output
  feature (in the kernel and the output, not in the input)."""
  inp, ker, out = specs
  last = ker[-1]
  if last in inp or last not in out:
    return None
  used = set(inp + ker + out)
  rank = next(c for c in string.ascii_letters if c not in used)
  hidden = out.replace(last, rank)
  return ((inp, ker[:-1] + rank, hidden), (hidden, rank + last, out),
          f"{out},{rank}{last}->{hidden}")


class LoraFactors:
  """Per-record squared norms and clipped sums of the LoRA factors ``a``,
  ``b`` of a kernel used as ``einsum(x, k0 + s a b)`` (Keras 3
  ``enable_lora``: ``s = lora_alpha / lora_rank``, ``k0`` frozen).

  A record's gradients are ``s dK b^T`` for ``a`` and ``s a^T dK`` for
  ``b``, ``dK`` its kernel gradient: the kernel gradients of two einsums,
  ``h = einsum(x, a)`` with output gradient ``g' = s g b^T``, and ``z =
  einsum(s h, b)`` with output gradient ``g``. ``g'`` and ``s h`` are
  formed once from each record's own rows; the norms are certified for
  them as for any linear kernel (``linear.py``, "Certified norms") and the
  clipped sums are formed from the same tensors, so each record adds what
  its norms bound.
  """

  def __init__(self, specs: Specs, x: tf.Tensor, g: tf.Tensor, a: Any, b: Any,
               scale: float, records: linear.Records) -> None:
    self.specs = specs
    # Layers whose specs have no LoRA factors are not supported (the rule's
    # ``supports``): never built.
    self.down, self.up, back = cast(Tuple[Specs, Specs, str],
                                    lora_specs(specs))
    self.a, self.b, self.scale = a, b, scale
    a = tf.cast(a, x.dtype)
    b = tf.cast(b, x.dtype)
    self.x, self.g, self.records = x, g, records
    self.g_back = scale * tf.einsum(back, g, b)
    inp, ker_a, hidden = self.down
    self.h = scale * tf.einsum(f"{inp},{ker_a}->{hidden}", x, a)

  def rows(self) -> Tuple[Rows, Rows, tf.Tensor]:
    """``(rows of a's gradient, rows of b's gradient, [R] mass)``: grouped
    rows (``linear.py``) of the two factor gradients, and the record's mass
    over the layer's own kernel rows (``linear.position_mass``)."""
    records = self.records
    a_shape, b_shape = self.a.shape, self.b.shape
    kernel_shape = list(a_shape[:-1]) + [b_shape[-1]]
    mass = linear.record_mass(linear.position_mass(*einsum_rows(
        self.specs, kernel_shape, self.x, self.g, records)), records)
    return (einsum_rows(self.down, a_shape, self.x, self.g_back, records),
            einsum_rows(self.up, b_shape, self.h, self.g, records), mass)

  def sq_norms(self) -> List[tf.Tensor]:
    """Certified for the exact factor gradients (``lora_sq_norms``)."""
    return lora_sq_norms([self])

  def clipped_sums(self, scales: List[tf.Tensor],
                   keep: tf.Tensor) -> List[tf.Tensor]:
    records = self.records
    kept = lambda t: linear.per_example(t, records, keep)
    scaled = lambda t, s: linear.per_example(kept(t), records, s)
    inp, ker_a, hidden = self.down
    _, ker_b, out = self.up
    return [tf.einsum(f"{inp},{hidden}->{ker_a}", kept(self.x),
                      scaled(self.g_back, scales[0])),
            tf.einsum(f"{hidden},{out}->{ker_b}", kept(self.h),
                      scaled(self.g, scales[1]))]


def lora_sq_norms(calls: Sequence[LoraFactors]) -> List[tf.Tensor]:
  """``[R]`` certified squared norms of the factor gradients ``a``, ``b``
  summed over ``calls`` (``LoraFactors`` of one layer's calls in one forward
  pass: a shared layer). A record's gradient of a factor is the kernel
  gradient of its einsum over the rows of every call concatenated along
  positions (``linear.py``: the ghost or materialised norm includes the
  cross terms between calls). ``g'`` and ``s h`` are rounded products: the
  error of each call's rows is within ``linear.product_error`` of its mass
  over the layer's kernel rows, and the errors of the calls add up."""
  first = calls[0]
  records = first.records
  parts = [call.rows() for call in calls]

  def rows(i: int) -> Rows:
    return (tf.concat([p[i][0] for p in parts], 1),
            tf.concat([p[i][1] for p in parts], 1))

  mass = tf.add_n([p[2] for p in parts])
  frobenius = lambda v: abs(first.scale) * tf.norm(tf.cast(
      tf.reshape(v, [-1]), tf.float64))
  a_shape, b_shape = first.a.shape, first.b.shape
  return [linear.kernel_sq_norms(*rows(0), records, linear.product_error(
      mass, frobenius(first.b), b_shape[-1])),
          linear.kernel_sq_norms(*rows(1), records, linear.product_error(
              mass, frobenius(first.a),
              a_shape.num_elements() // a_shape[-1]))]


def lora_enabled(layer: Any) -> bool:
  return bool(getattr(layer, "lora_enabled", False))


class LoraMixin(linear.LinearRule):
  """LoRA for a linear rule whose layer computes ``einsum(x, kernel)``
  (``lora_specs_for``): with ``enable_lora`` the trainable variables are
  the factors (and the bias), the base kernel is frozen."""

  def lora_specs_for(self, layer: Any,
                     x_rank: Optional[int]) -> Optional[Specs]:
    """Parsed ``(inp, ker, out)`` of the layer's kernel einsum for inputs
    of rank ``x_rank`` (None: any rank the layer takes), or None."""
    raise NotImplementedError

  def supports(self, layer: Any) -> bool:
    if not lora_enabled(layer):
      return super().supports(layer)
    if getattr(layer, "quantization_mode", None):
      return False
    specs = self.lora_specs_for(layer, None)
    return specs is not None and lora_specs(specs) is not None

  def kernel_variables(self, layer: Any) -> List[Any]:
    if lora_enabled(layer):
      return [layer.lora_kernel_a, layer.lora_kernel_b]
    return super().kernel_variables(layer)

  def kernel_part(self, layer: Any,
                  calls: List[Tuple[tf.Tensor, tf.Tensor]],
                  records: linear.Records) -> linear.KernelPart:
    """With LoRA, the factors of each call (a shared layer: a record's
    gradients summed over the calls, ``lora_sq_norms``)."""
    if not lora_enabled(layer):
      return super().kernel_part(layer, calls, records)
    return LoraKernel([LoraFactors(
        cast(Specs, self.lora_specs_for(layer, x.shape.rank)), x,
        tf.cast(g, x.dtype), layer.lora_kernel_a, layer.lora_kernel_b,
        layer.lora_alpha / layer.lora_rank, records) for x, g in calls])


@dataclasses.dataclass(frozen=True)
class LoraKernel:
  """The LoRA factors' share of a linear rule's state: one ``LoraFactors``
  per call of the layer."""
  calls: List[LoraFactors]

  def sq_norms(self) -> List[tf.Tensor]:
    return lora_sq_norms(self.calls)

  def clipped_sums(self, scales: List[tf.Tensor],
                   keep: tf.Tensor) -> List[tf.Tensor]:
    if len(self.calls) == 1:
      return self.calls[0].clipped_sums(scales, keep)
    return [tf.add_n(list(parts)) for parts in zip(*(
        call.clipped_sums(scales, keep) for call in self.calls))]


class EinsumDenseRule(LoraMixin, linear.LinearRule):
  """keras.layers.EinsumDense: any equation without kernel-only letters;
  with LoRA, equations whose last kernel letter is an output feature."""

  def lora_specs_for(self, layer: Any,
                     x_rank: Optional[int]) -> Optional[Specs]:
    return self.parse(layer, x_rank)

  def parse(self, layer: Any, x_rank: Optional[int] = None) -> Optional[Specs]:
    """The layer's ``(inp, ker, out)`` for inputs of rank ``x_rank``
    (None: the equation's own rank, a one-letter ellipsis)."""
    equation = layer.equation.replace(" ", "")
    if x_rank is None:
      lhs = equation.split("->")[0]
      x_rank = len(lhs.split(",")[0].replace("...", "."))
    return parse_equation(equation, x_rank)

  def supports(self, layer: Any) -> bool:
    return super().supports(layer) and self.parse(layer) is not None

  def _specs(self, layer: Any, x: tf.Tensor) -> Specs:
    specs = self.parse(layer, x.shape.rank)
    if specs is None:
      raise ValueError(f"EinsumDense equation {layer.equation!r} with input "
                       f"rank {x.shape.rank} is not supported.")
    return specs

  def kernel_rows(self, layer: Any, x: tf.Tensor, g: tf.Tensor,
                  records: linear.Records) -> Rows:
    return einsum_rows(self._specs(layer, x), layer.kernel.shape, x, g,
                       records)

  def kernel_sum(self, layer: Any, x: tf.Tensor, g: tf.Tensor) -> tf.Tensor:
    inp, ker, out = self._specs(layer, x)
    return tf.einsum(f"{inp},{out}->{ker}", x, g)


def register_all(register: rule_types.Register,
                 modules: Sequence[Any]) -> None:
  for keras in modules:
    register(keras.layers.EinsumDense, EinsumDenseRule())
