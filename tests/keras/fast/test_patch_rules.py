"""KerasHub's ViT patch embedding on crafted records
(``tf_dp/keras/fast/patch_rules.py``).

The layer's variables are a class token, the patch convolution's kernel and
bias and the position table. Records are crafted as in ``test_linear``:
patches alternating +M w and -M w (M up to 1e9: their kernel gradient terms
cancel), output gradients alternating over positions (equal patches:
cancelling terms again), huge (1e15), tiny (1e-20) or ordinary. For every
record:

1. the kernel's squared norm is at least the exact float64 squared norm
   of the record's kernel gradient (computed here from the layer's
   formula; relative tolerance 1e-6); the class token's and the position
   table's equal the exact ones to 1e-4 (copies of rows of g); the bias's
   gradient, a float32 sum over positions that may cancel, is added to the
   sum as it is and is checked by 2. only;
2. removing the record moves the float32 clipped sum by at most C
   (1 + 1e-4: float32 rounding of the other records' terms).
"""

import numpy as np
import pytest
import tensorflow as tf

from tf_dp.keras.fast import patch_rules
from tf_dp.keras.fast import rules as rules_lib
from tests.keras.fast import test_linear

keras_hub = pytest.importorskip("keras_hub")

IMAGE, PATCH, CHANNELS, DIM = 8, 2, 3, 8
GRID = IMAGE // PATCH
CLIP = 1.0


def _layer(use_class_token=True):
  from keras_hub.src.models.vit import vit_layers  # pylint: disable=g-import-not-at-top
  layer = vit_layers.ViTPatchingAndEmbedding(
      image_size=(IMAGE, IMAGE), patch_size=(PATCH, PATCH), hidden_dim=DIM,
      num_channels=CHANNELS, use_class_token=use_class_token)
  layer(tf.zeros([1, IMAGE, IMAGE, CHANNELS]))
  return layer


def _image(patches):
  """``[GRID * GRID, PATCH * PATCH * CHANNELS]`` patches -> an image."""
  blocks = patches.reshape(GRID, GRID, PATCH, PATCH, CHANNELS)
  return blocks.transpose(0, 2, 1, 3, 4).reshape(IMAGE, IMAGE, CHANNELS)


def _patches(image):
  blocks = image.reshape(GRID, PATCH, GRID, PATCH, CHANNELS)
  return blocks.transpose(0, 2, 1, 3, 4).reshape(GRID * GRID, -1)


def _records(rng, magnitude, positions):
  """(x [R, H, W, C], g [R, positions, D]) float32, one record per mode."""
  features = PATCH * PATCH * CHANNELS
  xs, gs = [], []
  for mode in test_linear.MODES:
    if mode == "cancel_x":  # Patches alternate +M w and -M w.
      x = _image(test_linear._alternating(  # pylint: disable=protected-access
          (GRID * GRID, features), rng, magnitude))
    else:
      x = test_linear._record((IMAGE, IMAGE, CHANNELS), mode, rng,  # pylint: disable=protected-access
                              magnitude, False)
    xs.append(x)
    gs.append(test_linear._out_grad((positions, DIM), mode, rng, magnitude))  # pylint: disable=protected-access
  return np.stack(xs).astype("float32"), np.stack(gs).astype("float32")


def _exact_sq_norms(layer, x, g):
  """``[R, variables]`` float64 squared norms of each record's gradients,
  in the order of ``rule.variables(layer)``."""
  x, g = x.astype(np.float64), g.astype(np.float64)
  start = 1 if layer.use_class_token else 0
  out = []
  for r in range(len(x)):
    conv_g = g[r, start:]
    kernel = _patches(x[r]).T @ conv_g
    norms = [np.sum(g[r, 0] ** 2)] if start else []
    norms += [np.sum(kernel ** 2), np.sum(np.sum(conv_g, 0) ** 2),
              np.sum(g[r] ** 2)]
    out.append(norms)
  return np.asarray(out)


@pytest.mark.parametrize("use_class_token", [True, False],
                         ids=["class_token", "no_class_token"])
@pytest.mark.parametrize("magnitude", [1e3, 1e6, 1e9])
def test_norms_bound_every_record_and_one_record_moves_the_sum_by_c(
    magnitude, use_class_token):
  layer = _layer(use_class_token)
  rule = rules_lib.rule_for(layer)
  assert isinstance(rule, patch_rules.ViTPatchingAndEmbeddingRule)
  assert len(rule.variables(layer)) == 3 + use_class_token
  rng = np.random.default_rng(int(magnitude) % 101 + use_class_token)
  x, g = _records(rng, magnitude, GRID * GRID + use_class_token)
  sq, sums = test_linear._rule_outputs(layer, rule, x, g)  # pylint: disable=protected-access
  exact = _exact_sq_norms(layer, x, g)
  ok = np.isfinite(sq) & (exact > 1e-30)
  kernel = int(use_class_token)
  assert np.all(sq[ok[:, kernel], kernel]
                >= exact[ok[:, kernel], kernel] * (1 - 1e-6)), (sq, exact)
  # One example per record: the token's and the table's gradients are rows
  # of g, exact in float32.
  copied = [0, 3] if use_class_token else [2]
  np.testing.assert_allclose(sq[:, copied][ok[:, copied]],
                             exact[:, copied][ok[:, copied]], rtol=1e-4)
  for r, mode in enumerate(test_linear.MODES):
    _, without = test_linear._rule_outputs(layer, rule, x, g, drop=r)  # pylint: disable=protected-access
    moved = np.sqrt(sum(np.sum(np.square(np.asarray(a, np.float64)
                                         - np.asarray(b, np.float64)))
                        for a, b in zip(sums, without)))
    assert moved <= CLIP * (1 + 1e-4), (mode, moved)


def test_frozen_parts_are_left_out_and_unsupported_forms_refused():
  layer = _layer()
  rule = rules_lib.rule_for(layer)
  layer.position_embedding.trainable = False
  layer.patch_embedding.trainable = False
  assert rule.variables(layer) == [layer.class_token]
  x, g = _records(np.random.default_rng(0), 1e3, GRID * GRID + 1)
  sq, sums = test_linear._rule_outputs(layer, rule, x, g)  # pylint: disable=protected-access
  assert sq.shape == (len(x), 1) and sums[0].shape == (1, 1, DIM)
  overlapping = _layer()
  overlapping.patch_embedding.strides = (1, 1)
  assert rules_lib.rule_for(overlapping) is None
