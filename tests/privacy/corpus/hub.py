"""KerasHub task models (Keras 3 only) built from their backbones'
constructors with tiny configurations (presets download weights),
``preprocessor=None``, with and without ``backbone.enable_lora``."""

import importlib

import numpy as np

from tests.privacy.corpus import case as corpus

VOCAB, SEQ, IMAGE = 50, 8, 8
HUB = dict(flavours=(corpus.KERAS3,), requires=("keras_hub",),
           batch_size=4)


def _hub():
  return importlib.import_module("keras_hub")


def _padded_tokens(rng, n):
  tokens = rng.integers(1, VOCAB, size=(n, SEQ)).astype("int32")
  lengths = rng.integers(4, SEQ + 1, size=(n, 1))
  mask = (np.arange(SEQ)[None, :] < lengths).astype("int32")
  return tokens * mask, mask


def _classification(rng, n):
  tokens, mask = _padded_tokens(rng, n)
  x = {"token_ids": tokens, "padding_mask": mask,
       "segment_ids": np.zeros_like(tokens)}
  return x, corpus.labels(rng, n, 3)


def _next_tokens(rng, n):
  """Next-token labels, padding weighted out of each sequence's loss."""
  tokens, mask = _padded_tokens(rng, n)
  labels = np.concatenate([tokens[:, 1:], np.zeros((n, 1), "int32")], 1)
  weights = np.concatenate([mask[:, 1:], np.zeros((n, 1), "int32")], 1)
  return ({"token_ids": tokens, "padding_mask": mask}, labels,
          weights.astype("float32"))


def _with_lora(backbone, model, lora):
  if lora:
    backbone.enable_lora(4)
    corpus.random_lora_factors(model)
  return model


def _bert(lora):
  hub = _hub()
  backbone = hub.models.BertBackbone(
      vocabulary_size=VOCAB, num_layers=1, num_heads=2, hidden_dim=16,
      intermediate_dim=32, max_sequence_length=SEQ)
  return _with_lora(backbone, hub.models.BertTextClassifier(
      backbone, num_classes=3, preprocessor=None), lora)


def _gpt2(lora):
  hub = _hub()
  backbone = hub.models.GPT2Backbone(
      vocabulary_size=VOCAB, num_layers=1, num_heads=2, hidden_dim=16,
      intermediate_dim=32, max_sequence_length=SEQ)
  return _with_lora(backbone, hub.models.GPT2CausalLM(
      backbone, preprocessor=None), lora)


def _gemma(lora):
  hub = _hub()
  backbone = hub.models.GemmaBackbone(
      vocabulary_size=VOCAB, num_layers=1, num_query_heads=2,
      num_key_value_heads=1, hidden_dim=16, intermediate_dim=32, head_dim=8)
  return _with_lora(backbone, hub.models.GemmaCausalLM(
      backbone, preprocessor=None), lora)


@corpus.case(_classification, origin="keras_hub BertTextClassifier", **HUB)
def bert_classifier(K):
  del K
  return _bert(lora=False)


@corpus.case(_classification, origin="keras_hub BertTextClassifier, "
                                     "backbone.enable_lora(4)", slow=True,
             **HUB)
def bert_classifier_lora(K):
  del K
  return _bert(lora=True)


@corpus.case(_next_tokens, origin="keras_hub GPT2CausalLM", slow=True,
             **HUB)
def gpt2_causal_lm(K):
  del K
  return _gpt2(lora=False)


@corpus.case(_next_tokens, origin="keras_hub GPT2CausalLM, "
                                  "backbone.enable_lora(4)", **HUB)
def gpt2_causal_lm_lora(K):
  del K
  return _gpt2(lora=True)


@corpus.case(_next_tokens, origin="keras_hub GemmaCausalLM, "
                                  "backbone.enable_lora(4)", **HUB)
def gemma_causal_lm_lora(K):
  del K
  return _gemma(lora=True)


@corpus.case(corpus.images((IMAGE, IMAGE, 3), num_classes=3),
             origin="keras_hub ViTImageClassifier", slow=True, **HUB)
def vit_classifier(K):
  del K
  hub = _hub()
  backbone = hub.models.ViTBackbone(
      image_shape=(IMAGE, IMAGE, 3), patch_size=2, num_layers=1, num_heads=2,
      hidden_dim=16, mlp_dim=32)
  return hub.models.ViTImageClassifier(backbone, num_classes=3)
