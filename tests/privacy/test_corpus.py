"""Ordinary Keras models train privately: the judge of false refusals.

Each model of the corpus (``tests/privacy/corpus``: vision, text, time
series, recommendation, tabular, keras.applications, custom layers and
subclassed models, LoRA, KerasHub), written as its authors write it, trains
two DP steps (``make_private``, a ``DPOptimizer`` with clip 1 and noise
multiplier 1.1, ``fit`` on two batches, shuffled) on both per-example paths
and on every Keras flavour it exists in. The test id names the model, the
flavour and the path. The cases marked slow (to keep the fast set near 4
minutes of CPU per stack): every model on the vectorized path, and the
models marked ``Case.slow``; of those, all but three KerasHub models are
also marked long, run by hand (``TF_DP_LONG=1 bash scripts/test.sh``): CI
trains 40 models. Measured on TF 2.21 (2 cores): the long keras.applications
networks take 18-60 s a case, the recurrent models 2-15 s (their exact path
runs a per-record loop), U-Net 5-8 s; all 64 long cases pass.

A refusal (any exception) fails, and so does a trainable weight that is not
finite or did not change: the noise moves every weight that receives an
update, so an unchanged one was silently skipped. Two refusals are by
design and asserted as such, on the vectorized path only: a model with
tf_dp's DPBatchNormalization (its statistics come from the fast path's
taps), and a Keras 3 model with an EinsumDense or MultiHeadAttention on
TensorFlow >= 2.16 (oneDNN corrupts memory for the matmul vectorized_map
builds for them; tensorflow#117700). A corpus model whose published code
mixes examples (``Case.mixes_examples``) must be refused on every path.
"""

import numpy as np
import pytest
import tensorflow as tf

from tests.privacy import corpus
from tests.privacy.corpus import run
from tf_dp.errors import UnsupportedModelError
from tf_dp.keras import model_checks

KERAS = run.flavour_modules()
ONEDNN_HAZARD = tuple(int(v) for v in tf.__version__.split(".")[:2]) >= (
    2, 16)


# Slow models that CI still trains (the rest of the slow ones are marked
# long: scripts/test.sh runs them with TF_DP_LONG=1): KerasHub task models
# of three more kinds, at about 10 s a case.
IN_CI = frozenset({"bert_classifier_lora", "gpt2_causal_lm",
                   "vit_classifier"})


def _params():
  for case in corpus.CASES:
    for flavour in case.flavours:
      if flavour not in KERAS:
        continue  # tf.keras 2.15 alone on TF 2.15: Keras 3 models absent.
      for path in run.PATHS:
        marks = []
        if case.slow or path == "vectorized":
          marks.append(pytest.mark.slow)
        if case.slow and case.name not in IN_CI:
          marks.append(pytest.mark.long)
        yield pytest.param(case, flavour, path, marks=marks,
                           id=f"{case.name}-{flavour}-{path}")


def _designed_refusal(model, flavour, path):
  """The refusal (a message fragment) this model meets by design on this
  path, or None."""
  if path != "vectorized":
    return None
  layers = model_checks.all_layers(model)
  if any(type(layer).__name__ == "DPBatchNormalization" for layer in layers):
    return "DPBatchNormalization needs the fast clipping path"
  K = KERAS[flavour]
  einsum = (K.layers.EinsumDense, K.layers.MultiHeadAttention)
  if flavour == corpus.KERAS3 and ONEDNN_HAZARD and any(
      isinstance(layer, einsum) for layer in layers):
    return "oneDNN kernels corrupt memory"
  return None


@pytest.mark.parametrize("case,flavour,path", list(_params()))
def test_ordinary_model_trains_privately(case, flavour, path):
  for module in case.requires:
    pytest.importorskip(module)
  K = KERAS[flavour]
  label = f"{case.name} ({flavour}, per_example_method={path!r})"
  if case.mixes_examples_in(flavour):
    with pytest.raises(UnsupportedModelError):
      run.train_two_steps(case, K, path)
    return
  refusal = _designed_refusal(case.build(K), flavour, path)
  if refusal is not None:
    with pytest.raises(UnsupportedModelError, match=refusal):
      run.train_two_steps(case, K, path)
    return
  try:
    trained = run.train_two_steps(case, K, path)
  except Exception as e:  # pylint: disable=broad-except
    raise AssertionError(
        f"{label} was refused: {type(e).__name__}: {e}\n"
        f"The model: {case.origin}.") from e
  not_finite = [name for name, value in trained.after
                if not np.all(np.isfinite(value))]
  assert not not_finite, f"{label}: non-finite weights {not_finite}"
  unchanged = [name for (name, before), (_, after)
               in zip(trained.before, trained.after)
               if np.array_equal(before, after)]
  assert not unchanged, (
      f"{label}: trainable weights {unchanged} did not change in two noised "
      f"DP steps (a silent zero update)")
