"""KerasHub transformers train privately on the fast path: BERT and ViT with
a classification head, GPT-2 and Gemma with a causal-LM head on the tied
token embedding (labels and padding mask per token), with and without
``backbone.enable_lora(4)``; Llama and Phi-3 (untied token embedding) under
a classification head, where ``reverse_embeddings`` has no gradient.

Tiny random-init configs (presets need downloads): 2 layers, hidden 16,
sequence 8, vocabulary 50 (ViT: 8x8x3 images in 2x2 patches, a class
token), batch 4, no dropout. Each case: the clipping plan
has no per-layer fallback, and one noiseless fast step equals a loop over
examples (``tests/keras/fast/loop_reference.py``; tolerance 1e-5, clip 0.5
against gradient norms ~1-10, so a wrong norm or a missing use of the
tied embedding moves weights by far more).
"""

import warnings

import numpy as np
import pytest
import tensorflow as tf

keras_hub = pytest.importorskip("keras_hub")

from tf_dp.keras import backend  # pylint: disable=g-import-not-at-top
from tests.keras.fast import loop_reference  # pylint: disable=g-import-not-at-top

K3 = backend.keras3_module()
VOCAB, SEQ, BATCH, IMAGE = 50, 8, 4, 8
FALLBACK = "local vectorized_map"


def _bert():
  backbone = keras_hub.models.BertBackbone(
      vocabulary_size=VOCAB, num_layers=2, num_heads=2, hidden_dim=16,
      intermediate_dim=32, max_sequence_length=SEQ, dropout=0.0)
  return backbone, keras_hub.models.BertTextClassifier(
      backbone, num_classes=3, preprocessor=None, dropout=0.0)


def _gpt2():
  backbone = keras_hub.models.GPT2Backbone(
      vocabulary_size=VOCAB, num_layers=2, num_heads=2, hidden_dim=16,
      intermediate_dim=32, max_sequence_length=SEQ, dropout=0.0)
  return backbone, keras_hub.models.GPT2CausalLM(backbone, preprocessor=None)


def _gemma():
  backbone = keras_hub.models.GemmaBackbone(
      vocabulary_size=VOCAB, num_layers=2, num_query_heads=2,
      num_key_value_heads=1, hidden_dim=16, intermediate_dim=32,
      head_dim=8, dropout=0.0)
  return backbone, keras_hub.models.GemmaCausalLM(backbone, preprocessor=None)


def _vit():
  backbone = keras_hub.models.ViTBackbone(
      image_shape=(IMAGE, IMAGE, 3), patch_size=2, num_layers=2, num_heads=2,
      hidden_dim=16, mlp_dim=32)
  return backbone, keras_hub.models.ViTImageClassifier(backbone,
                                                       num_classes=3)


MODELS = {"bert": _bert, "gpt2": _gpt2, "gemma": _gemma, "vit": _vit}


def _batch(name, rng):
  if name == "vit":
    x = rng.normal(size=(BATCH, IMAGE, IMAGE, 3)).astype("float32")
    return x, rng.integers(0, 3, size=BATCH).astype("int32"), None
  tokens = rng.integers(1, VOCAB, size=(BATCH, SEQ)).astype("int32")
  lengths = np.array([SEQ, SEQ - 2, SEQ - 3, 5])
  mask = (np.arange(SEQ)[None, :] < lengths[:, None]).astype("int32")
  tokens *= mask
  x = {"token_ids": tokens, "padding_mask": mask}
  if name == "bert":
    x["segment_ids"] = np.zeros_like(tokens)
    return x, rng.integers(0, 3, size=BATCH).astype("int32"), None
  # Next-token labels, padding masked out of each sequence's loss.
  labels = np.concatenate([tokens[:, 1:], np.zeros((BATCH, 1), "int32")], 1)
  weights = np.concatenate([mask[:, 1:], np.zeros((BATCH, 1), "int32")], 1)
  return x, labels, weights.astype("float32")


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_keras_hub_model_equals_loop(name, lora):
  K3.utils.set_random_seed(0)
  backbone, model = MODELS[name]()
  if lora:
    backbone.enable_lora(4)
  rng = np.random.default_rng(0)
  if lora:  # b starts at zero: random factors exercise both gradients.
    for v in model.trainable_variables:
      if "lora_kernel_b" in v.path:
        v.assign(0.3 * rng.normal(size=v.shape))
  x, y, weights = _batch(name, rng)
  loss = K3.losses.SparseCategoricalCrossentropy(from_logits=True)
  plan = loop_reference.fast_step_matches_loop(
      K3, model, x, y, 0.5, loss=loss, sample_weight=weights,
      run_eagerly=True)
  assert not [n for n, p in plan.items() if FALLBACK in p], plan


def test_gpt2_lora_trains_in_graph_mode():
  """fit as users run it (a traced step, noise on): finite, changing
  weights and a finite loss, with only the LoRA factors (and the query and
  value biases) trained. One layer: tracing the step dominates the time."""
  K3.utils.set_random_seed(1)
  backbone = keras_hub.models.GPT2Backbone(
      vocabulary_size=VOCAB, num_layers=1, num_heads=2, hidden_dim=16,
      intermediate_dim=32, max_sequence_length=SEQ, dropout=0.0)
  model = keras_hub.models.GPT2CausalLM(backbone, preprocessor=None)
  backbone.enable_lora(4)
  x, y, weights = _batch("gpt2", np.random.default_rng(1))
  before = [np.array(v.numpy()) for v in model.trainable_variables]
  assert all("lora" in v.path or v.path.endswith("bias")
             for v in model.trainable_variables)
  model = loop_reference.compile_fast(
      K3, model, BATCH, K3.losses.SparseCategoricalCrossentropy(
          from_logits=True), 1.0, learning_rate=0.1, noise_multiplier=0.5)
  history = model.fit(x, y, sample_weight=weights, batch_size=BATCH,
                      epochs=2, verbose=0).history
  assert np.all(np.isfinite(history["loss"])), history
  after = [v.numpy() for v in model.trainable_variables]
  assert all(np.all(np.isfinite(a)) for a in after)
  assert any(not np.array_equal(a, b) for a, b in zip(after, before))


@pytest.mark.parametrize("name", ["gpt2", "gemma"])
def test_one_changed_sequence_moves_the_clipped_sum_by_at_most_2c(name):
  """The record of a causal LM is the sequence: all its tokens' losses
  (labels and padding weights per token) form one record's gradient, so
  replacing one sequence (tokens, labels, padding) moves the fast path's
  clipped sum by at most 2C (relative 1e-5: float32 sums)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tf_dp.dp_query.gaussian_query import GaussianSumQuery  # pylint: disable=g-import-not-at-top
  from tf_dp.keras import losses as losses_lib  # pylint: disable=g-import-not-at-top
  from tf_dp.keras.fast import clipped_sum  # pylint: disable=g-import-not-at-top
  K3.utils.set_random_seed(2)
  backbone, model = MODELS[name]()
  backbone.enable_lora(4)
  model.compile(loss=K3.losses.SparseCategoricalCrossentropy(from_logits=True))
  rng = np.random.default_rng(3)
  x, y, weights = _batch(name, rng)
  x2, y2, weights2 = (tf.nest.map_structure(np.copy, t)
                      for t in (x, y, weights))
  x2["token_ids"][2] = rng.integers(1, VOCAB, size=SEQ)
  x2["padding_mask"][2] = 1
  y2[2] = rng.integers(1, VOCAB, size=SEQ)
  weights2[2] = 1.0
  clip = 0.1
  query = GaussianSumQuery(clip, 0.0)
  params = query.derive_sample_params(query.initial_global_state())
  loss_fn = losses_lib.per_example_loss_fn(model)
  sums = [clipped_sum.clipped_batch_sum(model, loss_fn, a, b, tf.constant(w),
                                        query, params)[0]
          for a, b, w in ((x, y, weights), (x2, y2, weights2))]
  moved = np.sqrt(sum(np.sum(np.square(np.asarray(a, np.float64)
                                       - np.asarray(b, np.float64)))
                      for a, b in zip(*(tf.nest.flatten(s) for s in sums))))
  assert 0 < moved <= 2 * clip * (1 + 1e-5), moved


def test_one_changed_image_moves_the_vit_clipped_sum_by_at_most_2c():
  """Full fine-tuning of ViT: the class token, the patch convolution and the
  position table (``ViTPatchingAndEmbeddingRule``) and every other layer;
  one image replaced by a huge one (pixels x 1e6) moves the clipped sum by
  at most 2C (relative 1e-5: float32 sums)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tf_dp.dp_query.gaussian_query import GaussianSumQuery  # pylint: disable=g-import-not-at-top
  from tf_dp.keras import losses as losses_lib  # pylint: disable=g-import-not-at-top
  from tf_dp.keras.fast import clipped_sum  # pylint: disable=g-import-not-at-top
  K3.utils.set_random_seed(4)
  _, model = _vit()
  model.compile(loss=K3.losses.SparseCategoricalCrossentropy(from_logits=True))
  rng = np.random.default_rng(5)
  x, y, _ = _batch("vit", rng)
  x2, y2 = x.copy(), y.copy()
  x2[1] = 1e6 * rng.normal(size=x2[1].shape)
  y2[1] = (y[1] + 1) % 3
  clip = 0.1
  query = GaussianSumQuery(clip, 0.0)
  params = query.derive_sample_params(query.initial_global_state())
  loss_fn = losses_lib.per_example_loss_fn(model)
  sums = [clipped_sum.clipped_batch_sum(model, loss_fn, a, b, None, query,
                                        params)[0]
          for a, b in ((x, y), (x2, y2))]
  moved = np.sqrt(sum(np.sum(np.square(np.asarray(a, np.float64)
                                       - np.asarray(b, np.float64)))
                      for a, b in zip(*(tf.nest.flatten(s) for s in sums))))
  assert 0 < moved <= 2 * clip * (1 + 1e-5), moved


def _decoder_classifier(name):
  """A Llama or Phi-3 backbone (untied token embedding: its
  ``reverse_embeddings`` is used by no call) under a pooled Dense head:
  KerasHub 0.32 has no classifier task for these backbones."""
  config = dict(vocabulary_size=VOCAB, num_layers=1, num_query_heads=2,
                num_key_value_heads=1, hidden_dim=16, intermediate_dim=32)
  if name == "llama":
    backbone = keras_hub.models.LlamaBackbone(**config)
  else:
    backbone = keras_hub.models.Phi3Backbone(**config)
  pooled = K3.layers.GlobalAveragePooling1D()(backbone.output)
  head = K3.layers.Dense(3, kernel_initializer=K3.initializers.GlorotUniform(
      seed=1))
  return backbone, K3.Model(backbone.input, head(pooled))


@pytest.mark.parametrize("name", ["llama", "phi3"])
def test_untied_token_embedding_under_a_classification_head(name):
  """Full fine-tuning (no LoRA). Regression: the rule's state for the
  reverse use, which no call makes, gave every record a NaN norm, every
  record was dropped and the whole DP update was exactly zero. Now, with
  no noise: clip 1e6 gives the plain mean gradient (Keras's own tape;
  atol 1e-5 against gradient entries ~0.1-1), clip 0.5 the per-example
  loop's step (1e-5); ``reverse_embeddings`` keeps its value (no
  gradient: Keras leaves it out)."""
  rng = np.random.default_rng(6)
  x, _, _ = _batch("bert", rng)
  del x["segment_ids"]
  y = rng.integers(0, 3, size=BATCH).astype("int32")
  loss = K3.losses.SparseCategoricalCrossentropy(from_logits=True)
  K3.utils.set_random_seed(0)
  backbone, model = _decoder_classifier(name)
  reverse = backbone.token_embedding.reverse_embeddings
  with tf.GradientTape() as tape:
    mean_loss = loss(y, model(x, training=True))
  grads = tape.gradient(mean_loss, model.trainable_variables)
  assert [v.path for v, g in zip(model.trainable_variables, grads)
          if g is None] == [reverse.path]
  expected = [np.asarray(v.numpy(), np.float64) - (
      0.0 if g is None else np.asarray(tf.convert_to_tensor(g), np.float64))
              for v, g in zip(model.trainable_variables, grads)]
  with pytest.warns(UserWarning, match="noise_multiplier=0"):
    model = loop_reference.compile_fast(K3, model, BATCH, loss, 1e6,
                                        run_eagerly=True)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
  for v, e in zip(model.trainable_variables, expected):
    np.testing.assert_allclose(np.asarray(v.numpy(), np.float64), e,
                               atol=1e-5, err_msg=v.path)
  # Keras's own notice, as for a plain step: None reached the optimizer.
  assert any("Gradients do not exist for variables ['token_embedding/"
             "reverse_embeddings']" in str(w.message) for w in caught)
  K3.utils.set_random_seed(0)
  backbone, model = _decoder_classifier(name)
  loop_reference.fast_step_matches_loop(K3, model, x, y, 0.5, loss=loss,
                                        run_eagerly=True)
