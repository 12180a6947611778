"""Rule for keras.layers.EinsumDense (and so MultiHeadAttention's parts).

The layer computes ``z = einsum(equation, x, kernel) + bias``. Its letters
fall into classes: the batch letter (first of the input), positions (input
and output, not kernel), contracted features K (input and kernel), output
features C (kernel and output), groups G (all three) and letters summed
out of the input alone. Per record and group the kernel gradient is then
``A^T G`` with rank-3 rows ``A`` = [positions, K] and ``G`` = [positions, C]
(``linear.py``), so no rank-4 x rank-2 matmul is ever built; the clipped
sum is one einsum ``input, output -> kernel`` on scaled output gradients.
"""

import string

import tensorflow as tf

from tf_dp.keras.fast import linear


def parse_equation(equation, input_rank):
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


def letter_classes(inp, ker, out):
  """``(batch, positions, groups, contracted, features)`` letter strings."""
  batch = inp[0]
  positions = "".join(c for c in inp[1:] if c in out and c not in ker)
  groups = "".join(c for c in inp if c in ker and c in out)
  contracted = "".join(c for c in inp if c in ker and c not in out)
  features = "".join(c for c in ker if c in out and c not in inp)
  return batch, positions, groups, contracted, features


def _size(kernel, ker, letters):
  dims = [kernel.shape[ker.index(c)] for c in letters]
  size = 1
  for d in dims:
    size *= d
  return size


class EinsumDenseRule(linear.LinearRule):
  """keras.layers.EinsumDense: any equation without kernel-only letters."""

  def supports(self, layer):
    # The input rank is unknown here; a one-letter ellipsis stands for it.
    equation = layer.equation.replace(" ", "")
    lhs = equation.split("->")[0]
    rank = len(lhs.split(",")[0].replace("...", "."))
    return (super().supports(layer)
            and parse_equation(equation, rank) is not None)

  def _specs(self, layer, x):
    specs = parse_equation(layer.equation, x.shape.rank)
    if specs is None:
      raise ValueError(f"EinsumDense equation {layer.equation!r} with input "
                       f"rank {x.shape.rank} is not supported.")
    return specs

  def kernel_rows(self, layer, x, g, records):
    inp, ker, out = self._specs(layer, x)
    batch, positions, groups, contracted, features = letter_classes(
        inp, ker, out)
    kernel = layer.kernel
    n_groups = _size(kernel, ker, groups)
    a = tf.einsum(f"{inp}->{batch}{positions}{groups}{contracted}", x)
    a = tf.reshape(a, [tf.shape(x)[0], -1, n_groups,
                       _size(kernel, ker, contracted)])
    g = tf.einsum(f"{out}->{batch}{positions}{groups}{features}", g)
    g = tf.reshape(g, [tf.shape(g)[0], -1, n_groups,
                       _size(kernel, ker, features)])
    return linear.grouped_rows(a, records), linear.grouped_rows(g, records)

  def kernel_sum(self, layer, x, g):
    inp, ker, out = self._specs(layer, x)
    return tf.einsum(f"{inp},{out}->{ker}", x, g)


def register_all(register, modules):
  for keras in modules:
    register(keras.layers.EinsumDense, EinsumDenseRule())
