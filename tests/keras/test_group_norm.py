"""``with_group_normalization``: BatchNormalization swapped for
GroupNormalization, which trains privately on the fast path."""

import numpy as np
import pytest

import tf_dp
from tests.keras import helpers

KERAS = helpers.keras_modules()


def _bn_cnn(K):
  L = K.layers  # pylint: disable=invalid-name
  inputs = K.Input((8, 8, 3))
  h = L.Conv2D(4, 3, name="conv")(inputs)
  h = L.ReLU()(L.BatchNormalization(name="norm")(h))
  return K.Model(inputs, L.Dense(3, name="head")(L.Flatten()(h)))


@pytest.mark.parametrize("K", KERAS)
def test_the_swapped_model_trains_on_the_fast_path(K):
  model = _bn_cnn(K)
  clone = tf_dp.keras.with_group_normalization(model)
  norm = clone.get_layer("norm")
  assert type(norm) is K.layers.GroupNormalization and norm.groups == 4
  # The other layers' weights are copied; the original is unchanged.
  np.testing.assert_array_equal(clone.get_layer("conv").get_weights()[0],
                                model.get_layer("conv").get_weights()[0])
  assert type(model.get_layer("norm")) is K.layers.BatchNormalization
  plan = dict((name, path) for name, _, path in
              tf_dp.keras.fast.clipping_plan(clone))
  assert plan["norm"].startswith("fast rule")
  clone = helpers.compile_dp(K, clone, 32)
  rng = np.random.default_rng(0)
  x = rng.normal(size=(32, 8, 8, 3)).astype("float32")
  y = rng.integers(0, 3, 32).astype("int32")
  before = clone.get_layer("norm").get_weights()[0].copy()
  clone.fit(x, y, batch_size=8, verbose=0)  # With the self-check.
  assert int(clone.optimizer.ledger.sample_count) == 4
  assert not np.array_equal(clone.get_layer("norm").get_weights()[0], before)


@pytest.mark.parametrize("K", KERAS)
def test_groups_that_do_not_divide_the_channels_name_the_layer(K):
  with pytest.raises(ValueError, match="'norm'.*groups=3.*4 channels"):
    tf_dp.keras.with_group_normalization(_bn_cnn(K), groups=3)
