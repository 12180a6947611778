"""KerasHub's RMS normalisations and position embedding on crafted records
(``tf_dp/keras/fast/norm_rules.py``, ``embedding_rules.py``): their
per-record gradients are materialised in float32 and added to the sum as
they are, so their norms are those of what each record adds (as for
LayerNormalization in ``test_linear``): removing a record moves the clipped
sum by at most C (1 + 1e-4), and the norms agree with the exact float64
ones to 1e-4 relative (float32 sums over cancelling positions), with the
generators of ``test_linear`` (cancelling positions to 1e9, huge 1e15, tiny
1e-20).
"""

import numpy as np
import pytest
import tensorflow as tf

from tf_dp.keras.fast import rules as rules_lib
from tests.keras.fast import test_linear

keras_hub = pytest.importorskip("keras_hub")

CLIP = 1.0


def _layers():
  from keras_hub.src.models.gemma import rms_normalization  # pylint: disable=g-import-not-at-top
  return {"gemma_rms": rms_normalization.RMSNormalization(epsilon=1e-6),
          "hub_rms": keras_hub.layers.RMSNormalization(6),
          "position": keras_hub.layers.PositionEmbedding(12)}


def _exact(name, x, g):
  x, g = x.astype(np.float64), g.astype(np.float64)
  if name == "position":
    per_record = g
  else:
    x_hat = x / np.sqrt(np.mean(x * x, -1, keepdims=True) + 1e-6)
    per_record = np.sum(g * x_hat, 1)
  return np.sum(np.square(per_record.reshape(len(x), -1)), 1)


@pytest.mark.parametrize("name", ["gemma_rms", "hub_rms", "position"])
@pytest.mark.parametrize("magnitude", [1e3, 1e9])
def test_norms_bound_every_record_and_one_record_moves_the_sum_by_c(
    name, magnitude):
  layer = _layers()[name]
  rng = np.random.default_rng(int(magnitude) % 89 + len(name))
  shape = (10, 6)
  x = np.stack([test_linear._record(shape, mode, rng, magnitude, False)  # pylint: disable=protected-access
                for mode in test_linear.MODES]).astype("float32")
  layer(tf.constant(x[:1]))
  g = np.stack([test_linear._out_grad(shape, mode, rng, magnitude)  # pylint: disable=protected-access
                for mode in test_linear.MODES]).astype("float32")
  rule = rules_lib.rule_for(layer)
  assert rule is not None, name
  sq, sums = test_linear._rule_outputs(layer, rule, x, g)  # pylint: disable=protected-access
  exact = _exact(name, x, g)
  ok = np.isfinite(sq[:, 0]) & (exact > 1e-30)
  np.testing.assert_allclose(sq[ok, 0], exact[ok], rtol=1e-4)
  for r, mode in enumerate(test_linear.MODES):
    _, without = test_linear._rule_outputs(layer, rule, x, g, drop=r)  # pylint: disable=protected-access
    moved = np.sqrt(sum(np.sum(np.square(
        np.asarray(a, np.float64) - np.asarray(b, np.float64)))
                        for a, b in zip(sums, without)))
    assert moved <= CLIP * (1 + 1e-4), (name, mode, moved)
