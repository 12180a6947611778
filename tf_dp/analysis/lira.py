"""The likelihood-ratio membership-inference attack (LiRA; Carlini, Chien,
Nasr, Song, Terzis & Tramèr 2022) and the scores it reads.

LiRA scores an example by how its logit-scaled confidence
``φ = log(p_y / (1 − p_y))`` (``p_y``: the probability the model gives the
example's label) on the attacked model compares with φ on shadow models:

* the shadow models are the attacked model's architecture and training
  recipe (the same optimizer, epochs, and DP settings if it was trained
  with DP), each trained on a random half of a pool of examples that
  contains every candidate (the attacked model's members and non-members),
  with the record of which examples each one trained on;
* **online** LiRA fits, per example, one Gaussian to φ of the shadows that
  trained on it and one to those that did not, and scores the example by
  the log-likelihood ratio of its φ on the attacked model; every example
  needs at least two shadows of each kind (one with ``fix_variance``);
* **offline** LiRA uses only the shadows that did not train on the example
  (they can be trained before the candidates are known) and scores it by
  how far its φ lies above their Gaussian, in standard deviations (the
  one-sided likelihood ratio is a monotone function of this);
* ``fix_variance=True`` uses one variance, pooled over all examples, for
  each Gaussian: the paper's choice with few shadows (fewer than about 64).

The scores go to ``membership_inference_report`` like any attack's. Pure
numpy and scipy; ``tf_dp.keras.train_shadow_models`` trains Keras shadows.
"""

from typing import Any, Tuple

import numpy as np
from scipy import stats

from tf_dp.analysis import checks
from tf_dp.analysis.membership_inference import check_scores


def _outputs_and_labels(outputs, labels):
  """``outputs`` as a float64 [n, c] array (c = 1: a binary model's one
  output) and ``labels`` as int64 [n], both checked."""
  try:
    out = np.asarray(outputs, dtype=np.float64)
  except (TypeError, ValueError) as error:
    raise ValueError(f"outputs must be an array of real numbers ({error})."
                     ) from None
  if out.ndim == 1:
    out = out[:, None]
  if out.ndim != 2 or out.shape[0] == 0:
    raise ValueError("outputs must have shape [examples, classes] (or "
                     f"[examples] for one binary output); got {out.shape}.")
  if not np.all(np.isfinite(out)):
    row = int(np.flatnonzero(~np.all(np.isfinite(out), axis=1))[0])
    raise ValueError(f"outputs holds NaN or infinite values (first in row "
                     f"{row}): the model diverged or its input was bad.")
  lab = np.asarray(labels)
  if lab.ndim == 2 and lab.shape[1] == 1:
    lab = lab[:, 0]
  if lab.ndim != 1 or lab.shape[0] != out.shape[0]:
    raise ValueError(f"labels must hold one class index per example "
                     f"({out.shape[0]}); got shape {lab.shape}. One-hot "
                     "labels: pass labels.argmax(-1).")
  if lab.size and not np.all(np.mod(lab, 1) == 0):
    raise ValueError("labels must be integer class indices; got "
                     f"{lab[np.mod(lab, 1) != 0][:3]}.")
  lab = lab.astype(np.int64)
  classes = max(out.shape[1], 2)
  if lab.min() < 0 or lab.max() >= classes:
    raise ValueError(f"labels must lie in [0, {classes}) for outputs of "
                     f"{out.shape[1]} column(s); got labels from {lab.min()} "
                     f"to {lab.max()}.")
  return out, lab


def logit_confidence(outputs: Any, labels: Any,
                     from_logits: bool) -> np.ndarray:
  """``φ = log(p_y / (1 − p_y))`` of each example, computed stably.

  Args:
    outputs: the model's outputs, [n, classes] (softmax probabilities or
      logits) or [n] / [n, 1] (one sigmoid output: the probability, or
      logit, of class 1).
    labels: class indices, [n].
    from_logits: whether ``outputs`` are logits.

  Returns:
    float64 [n]. The cross-entropy loss of an example is
    ``log(1 + e^(−φ))``.
  """
  out, lab = _outputs_and_labels(outputs, labels)
  rows = np.arange(out.shape[0])
  if out.shape[1] == 1:
    sign = np.where(lab == 1, 1.0, -1.0)
    if from_logits:
      return sign * out[:, 0]
    _check_probabilities(out, binary=True)
    p = np.clip(out[:, 0], 0.0, 1.0)
    with np.errstate(divide="ignore"):
      phi = np.log(p) - np.log1p(-p)
    return np.clip(sign * phi, -_PHI_LIMIT, _PHI_LIMIT)
  if from_logits:
    own = out[rows, lab]
    others = out.copy()
    others[rows, lab] = -np.inf
    return own - np.logaddexp.reduce(others, axis=1)
  _check_probabilities(out, binary=False)
  own = out[rows, lab]
  rest = np.sum(out, axis=1) - own
  with np.errstate(divide="ignore"):
    phi = np.log(own) - np.log(np.maximum(rest, 0.0))
  return np.clip(phi, -_PHI_LIMIT, _PHI_LIMIT)


# |φ| of a probability that rounds to 0 or 1 (float64 resolves about 36).
_PHI_LIMIT = 40.0


def _check_probabilities(out, binary):
  ok = bool(np.all((out >= 0) & (out <= 1)))
  if not binary:
    ok = ok and bool(np.allclose(out.sum(axis=1), 1.0, atol=1e-3))
  if not ok:
    raise ValueError("outputs are not probabilities (each in [0, 1]"
                     f"{'' if binary else ', each row summing to 1'}) but "
                     "from_logits=False: pass from_logits=True for logits.")


def cross_entropy(outputs: Any, labels: Any, from_logits: bool) -> np.ndarray:
  """Each example's cross-entropy loss ``−log p_y`` (float64 [n])."""
  return np.logaddexp(0.0, -logit_confidence(outputs, labels, from_logits))


def _check_shadows(target_scores, shadow_scores, shadow_membership):
  target = check_scores("target_scores", target_scores)
  shadows = np.asarray(shadow_scores, dtype=np.float64)
  if shadows.ndim != 2 or shadows.shape[1] != target.size:
    raise ValueError(f"shadow_scores must have shape [shadow models, "
                     f"examples] = [k, {target.size}]; got {shadows.shape}.")
  if not np.all(np.isfinite(shadows)):
    raise ValueError("shadow_scores holds NaN or infinite values: a shadow "
                     "model diverged; drop it or retrain it.")
  membership = np.asarray(shadow_membership)
  if membership.shape != shadows.shape:
    raise ValueError(f"shadow_membership must have the shape of "
                     f"shadow_scores, {shadows.shape}; got "
                     f"{membership.shape}.")
  if membership.dtype != bool and not np.all(np.isin(membership, (0, 1))):
    raise ValueError("shadow_membership must be booleans (True: that shadow "
                     "model trained on that example).")
  return target, shadows, membership.astype(bool)


def _gaussian(shadows, mask, fix_variance, kind, fix):
  """Per-example mean and standard deviation of ``shadows`` where ``mask``."""
  counts = mask.sum(axis=0)
  need = 1 if fix_variance else 2
  short = np.flatnonzero(counts < need)
  if short.size:
    raise ValueError(
        f"shadow_membership: example {short[0]} (and {short.size - 1} "
        f"others) has {counts[short[0]]} shadow model(s) {kind} it; LiRA "
        f"needs at least {need} per example. {fix}")
  mean = np.sum(np.where(mask, shadows, 0.0), axis=0) / counts
  squares = np.where(mask, (shadows - mean) ** 2, 0.0)
  if fix_variance:
    dof = max(int(mask.sum()) - mean.size, 1)
    std = np.full(mean.shape, np.sqrt(squares.sum() / dof))
  else:
    std = np.sqrt(squares.sum(axis=0) / (counts - 1))
  return mean, np.maximum(std, 1e-6)


def lira_scores(target_scores: Any, shadow_scores: Any,
                shadow_membership: Any, *, online: bool = True,
                fix_variance: bool = False) -> np.ndarray:
  """LiRA's score of each example (higher: more likely a member).

  Args:
    target_scores: φ of each candidate on the attacked model, [n].
    shadow_scores: φ of each candidate on each shadow model, [k, n].
    shadow_membership: whether shadow i trained on candidate j, [k, n].
    online: the online attack (shadows with and without each example), or
      the offline one (only shadows without it).
    fix_variance: one variance per Gaussian, pooled over the examples.
  """
  target, shadows, membership = _check_shadows(target_scores, shadow_scores,
                                               shadow_membership)
  fix = ("Train more shadow models on random halves of the pool"
         + ("" if fix_variance else ", or pass fix_variance=True") + ".")
  mean_out, std_out = _gaussian(shadows, ~membership, fix_variance,
                                "without", fix)
  if not online:
    return (target - mean_out) / std_out
  mean_in, std_in = _gaussian(shadows, membership, fix_variance, "trained on",
                              fix)
  return (stats.norm.logpdf(target, mean_in, std_in)
          - stats.norm.logpdf(target, mean_out, std_out))


def random_halves(num_examples: int, num_shadow_models: int,
                  seed: int = 0) -> np.ndarray:
  """Membership of ``num_shadow_models`` random halves: bool [k, n].

  Each example is in exactly half of the rows (k even; k // 2 or one more
  for odd k), so every example has as many shadows with it as without it,
  as online LiRA wants; each row holds about half of the examples.
  """
  n = checks.check_positive_int("num_examples", num_examples)
  k = checks.check_positive_int("num_shadow_models", num_shadow_models)
  rng = np.random.default_rng(seed)
  # Carlini et al.'s balanced draw: rank k uniform keys per example; the
  # shadows where an example ranks in the lower half train on it.
  even = k - k % 2
  membership = np.zeros((k, n), dtype=bool)
  ranks = np.argsort(np.argsort(rng.random((even, n)), axis=0), axis=0)
  membership[:even] = ranks < even // 2
  if k % 2:
    membership[-1, rng.permutation(n)[:n // 2]] = True
  return membership


def split_scores(scores: Any, is_member: Any) -> Tuple[np.ndarray,
                                                       np.ndarray]:
  """``(member scores, non-member scores)`` of one score per candidate."""
  values = check_scores("scores", scores)
  member = np.asarray(is_member)
  if member.shape != values.shape or (
      member.dtype != bool and not np.all(np.isin(member, (0, 1)))):
    raise ValueError(f"is_member must be one boolean per candidate "
                     f"({values.size}); got shape {member.shape}, dtype "
                     f"{member.dtype}.")
  member = member.astype(bool)
  return values[member], values[~member]
