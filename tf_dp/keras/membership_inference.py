"""Membership-inference reports on a trained Keras classifier.

The attacks read the model's outputs only (``model.predict``), so they
work on any Keras classifier, trained with tf_dp or not, on both Keras
flavours. The metrics and their meaning are in
``tf_dp.analysis.membership_inference``; LiRA and what its shadow models
must be in ``tf_dp.analysis.lira``.

A report measures one attack on one model: its ε is a lower bound, never a
guarantee (a DP model's guarantee is the ledger's ε); an empirical ε above
the ledger's, on many examples, points at a bug worth reporting.
``audit_canaries`` reports a one-run audit (Steinke, Nasr & Jagielski
2023): canaries randomized into one training run
(``tf_dp.data.canaries``), scored on the trained model, give a bound that
holds with its confidence, beside the ledger's ε of that run.
"""

from typing import Any, Callable, Optional, Sequence, Tuple

import numpy as np

from tf_dp.analysis import ledger as ledger_lib
from tf_dp.analysis import lira
from tf_dp.analysis import membership_inference as metrics
from tf_dp.data.canaries import CanaryKind
from tf_dp.data.canaries import Canaries
from tf_dp.keras import canaries as canaries_lib

_PROBABILITY_ACTIVATIONS = ("softmax", "sigmoid")


def _from_logits(model: Any, outputs: np.ndarray,
                 from_logits: Optional[bool]) -> bool:
  """Whether ``outputs`` are logits: as given, else from the last layer's
  activation, else from the values (rows of probabilities sum to 1)."""
  if from_logits is not None:
    if not isinstance(from_logits, bool):
      raise ValueError(f"from_logits must be True, False or None; got "
                       f"{from_logits!r}.")
    return from_logits
  layers = getattr(model, "layers", None) or []
  activation = getattr(layers[-1], "activation", None) if layers else None
  name = getattr(activation, "__name__", None)
  if name in _PROBABILITY_ACTIVATIONS:
    return False
  if name == "linear":
    return True
  if outputs.ndim == 2 and outputs.shape[1] > 1:
    sums_to_one = np.allclose(outputs.sum(axis=1), 1.0, atol=1e-3)
    return not (sums_to_one and np.all(outputs >= 0))
  raise ValueError("Cannot tell whether the model's one output is a logit "
                   "or a probability: pass from_logits=True or False.")


def membership_scores(model: Any, x: Any, y: Any, *,
                      from_logits: Optional[bool] = None,
                      batch_size: int = 256) -> Tuple[np.ndarray, np.ndarray]:
  """``(losses, logit_confidences)`` of a classifier on examples ``(x, y)``.

  Args:
    model: a Keras classifier with one output: [n, classes] (softmax or
      logits) or [n, 1] (a sigmoid or a logit for class 1).
    x: its inputs, anything ``model.predict`` accepts for n examples.
    y: class indices, [n] (one-hot labels: pass ``y.argmax(-1)``).
    from_logits: whether the outputs are logits; None reads it from the
      last layer's activation (softmax, sigmoid: no; linear: yes), else
      from the values.
    batch_size: the batch size of ``model.predict``.

  Returns:
    Two float64 [n] arrays: each example's cross-entropy loss ``−log p_y``
    and its logit-scaled confidence ``φ = log(p_y / (1 − p_y))``.
  """
  outputs = model.predict(x, batch_size=batch_size, verbose=0)
  if isinstance(outputs, (list, tuple, dict)):
    raise ValueError("model must have one output (a classifier's "
                     f"probabilities or logits); it has {len(outputs)}. Score "
                     "one output: keras.Model(model.inputs, model.outputs[i]).")
  outputs = np.asarray(outputs, dtype=np.float64)
  phi = lira.logit_confidence(outputs, y,
                              _from_logits(model, outputs, from_logits))
  return np.logaddexp(0.0, -phi), phi


def loss_threshold_attack(model: Any, members: Tuple[Any, Any],
                          nonmembers: Tuple[Any, Any], *, delta: float,
                          from_logits: Optional[bool] = None,
                          fprs: Optional[Sequence[float]] = None,
                          alpha: float = 0.05, batch_size: int = 256
                          ) -> metrics.MembershipInferenceReport:
  """The loss-threshold attack (Yeom et al. 2018): score = −loss.

  Args:
    model: the trained classifier (see ``membership_scores``).
    members: ``(x, y)`` of examples it trained on.
    nonmembers: ``(x, y)`` of examples from the same distribution it never
      saw (a held-out split).
    delta: the δ of the ε lower bound (the training run's δ).
    from_logits: as in ``membership_scores``.
    batch_size: as in ``membership_scores``.
    fprs: as in ``tf_dp.analysis.membership_inference_report``.
    alpha: as in ``tf_dp.analysis.membership_inference_report``.

  Returns:
    A ``tf_dp.analysis.MembershipInferenceReport``.

  Raises:
    ValueError: a pair that is not ``(x, y)``, labels out of range, NaN
      outputs, or an FPR that the number of non-members cannot resolve.

  Example:
    >>> report = tf_dp.keras.loss_threshold_attack(
    ...     model, (x_train, y_train), (x_test, y_test), delta=1e-5)
    >>> print(report)
    >>> tf_dp.analysis.plot_roc(report).savefig("roc.png")
  """
  scored = []
  for name, pair in (("members", members), ("nonmembers", nonmembers)):
    if not isinstance(pair, (tuple, list)) or len(pair) != 2:
      raise ValueError(f"{name} must be a pair (x, y); got "
                       f"{type(pair).__name__}.")
    losses, _ = membership_scores(model, pair[0], pair[1],
                                  from_logits=from_logits,
                                  batch_size=batch_size)
    scored.append(-losses)
  return metrics.membership_inference_report(
      scored[0], scored[1], delta=delta, attack="loss threshold", fprs=fprs,
      alpha=alpha)


def train_shadow_models(train_model: Callable[[Any, Any], Any], x: Any,
                        y: Any, *, num_shadow_models: int, seed: int = 0,
                        from_logits: Optional[bool] = None,
                        batch_size: int = 256
                        ) -> Tuple[np.ndarray, np.ndarray]:
  """Trains LiRA's shadow models on random halves of the pool ``(x, y)``.

  Args:
    train_model: ``train_model(x_half, y_half)`` builds, compiles and fits
      a fresh model with the attacked model's recipe (architecture,
      optimizer, epochs, and DP settings if it was private) and returns it.
    x: the pool's inputs: every candidate whose membership is to be
      inferred (numpy arrays indexed by example).
    y: the pool's labels.
    num_shadow_models: how many (even: each example is in exactly half;
      16 or more for the online attack, more for per-example variances).
    seed: the draw of the halves (``tf_dp.analysis.lira.random_halves``).
    from_logits: as in ``membership_scores``.
    batch_size: as in ``membership_scores``.

  Returns:
    ``(shadow_scores, shadow_membership)``: φ of every candidate on every
    shadow, float64 [k, n], and which candidates each shadow trained on,
    bool [k, n]; pass both to ``lira_attack``.
  """
  x, y = np.asarray(x), np.asarray(y)
  if len(x) != len(y):
    raise ValueError(f"x and y must hold the same number of examples; got "
                     f"{len(x)} and {len(y)}.")
  membership = lira.random_halves(len(x), num_shadow_models, seed)
  scores = np.empty(membership.shape)
  for i, chosen in enumerate(membership):
    shadow = train_model(x[chosen], y[chosen])
    _, scores[i] = membership_scores(shadow, x, y, from_logits=from_logits,
                                     batch_size=batch_size)
  return scores, membership


def lira_attack(model: Any, x: Any, y: Any, is_member: Any,
                shadow_scores: Any, shadow_membership: Any, *, delta: float,
                online: bool = True, fix_variance: bool = False,
                from_logits: Optional[bool] = None,
                fprs: Optional[Sequence[float]] = None, alpha: float = 0.05,
                batch_size: int = 256) -> metrics.MembershipInferenceReport:
  """LiRA (Carlini et al. 2022) against ``model`` on the pool ``(x, y)``.

  Args:
    model: the attacked classifier, trained on the candidates where
      ``is_member`` (bool [n]) is True.
    x: the pool's inputs, as given to ``train_shadow_models``.
    y: the pool's labels.
    shadow_scores: the scores ``train_shadow_models`` returns.
    shadow_membership: the membership ``train_shadow_models`` returns.
    delta: as in ``loss_threshold_attack``.
    fprs: as in ``loss_threshold_attack``.
    alpha: as in ``loss_threshold_attack``.
    online: see ``tf_dp.analysis.lira``.
    fix_variance: see ``tf_dp.analysis.lira``.
  """
  _, phi = membership_scores(model, x, y, from_logits=from_logits,
                             batch_size=batch_size)
  scores = lira.lira_scores(phi, shadow_scores, shadow_membership,
                            online=online, fix_variance=fix_variance)
  member_scores, nonmember_scores = lira.split_scores(scores, is_member)
  return metrics.membership_inference_report(
      member_scores, nonmember_scores, delta=delta,
      attack=f"LiRA ({'online' if online else 'offline'})", fprs=fprs,
      alpha=alpha)


def canary_scores(model: Any, canaries: Canaries, *,
                  from_logits: Optional[bool] = None,
                  batch_size: int = 256) -> np.ndarray:
  """One score per canary of a trained model, higher meaning "included".

  Args:
    model: for Dirac canaries, the model ``with_dirac_canaries`` returned,
      trained; for input-space canaries, the trained classifier.
    canaries: the canaries of the run (``tf_dp.data.canaries``).
    from_logits: as in ``membership_scores`` (input-space canaries).
    batch_size: as in ``membership_scores`` (input-space canaries).

  Returns:
    float64 ``[m]``: minus the canary's audit-table entry (Dirac,
    ``tf_dp.keras.canaries.dirac_canary_scores``) or minus its loss
    (input-space: the loss-threshold score).
  """
  if isinstance(canaries, Canaries) and canaries.kind is not CanaryKind.DIRAC:
    if canaries_lib.has_dirac_canaries(model):
      raise ValueError(
          f"Score {canaries.kind} canaries on the model inside "
          f"{model.name!r} (the one given to with_dirac_canaries): the "
          f"wrapper's inputs are (x, canary_id).")
    losses, _ = membership_scores(model, canaries.x, canaries.y,
                                  from_logits=from_logits,
                                  batch_size=batch_size)
    return -losses
  return canaries_lib.dirac_canary_scores(model, canaries)


def audit_canaries(model: Any, canaries: Canaries, *, delta: float,
                   ledger: Any = None, ledger_epsilon: Optional[float] = None,
                   alpha: float = 0.05,
                   guesses: Optional[Sequence[Tuple[int, int]]] = None,
                   from_logits: Optional[bool] = None, batch_size: int = 256
                   ) -> metrics.MembershipInferenceReport:
  """The one-run audit of a trained model's canaries, beside the ledger.

  Args:
    model: the model trained on ``tf_dp.data.mix_canaries(...)`` (for
      Dirac canaries, the one ``with_dirac_canaries`` returned).
    canaries: the run's canaries, with their inclusion bits.
    delta: the run's δ.
    ledger: the run's ledger (``model.optimizer.ledger``): its ε at
      ``delta`` is reported beside the bound.
    ledger_epsilon: that ε, if the ledger is not at hand.
    alpha: 1 − the confidence.
    guesses: as in ``tf_dp.analysis.one_run_audit``.
    from_logits: as in ``membership_scores``.
    batch_size: as in ``membership_scores``.

  Returns:
    A ``tf_dp.analysis.MembershipInferenceReport`` with its ``one_run``
    bound; ``report.contradicts_ledger`` says whether the run leaked more
    than its ledger states.

  Raises:
    ValueError: if both ``ledger`` and ``ledger_epsilon`` are given.

  Example:
    >>> report = tf_dp.keras.audit_canaries(
    ...     model, canaries, delta=1e-5, ledger=model.optimizer.ledger)
    >>> print(report)
  """
  if ledger is not None and ledger_epsilon is not None:
    raise ValueError("Pass the run's ledger or its ledger_epsilon, not both.")
  if ledger is not None:
    ledger_epsilon, _ = ledger_lib.compute_epsilon_from_ledger(ledger, delta)
  scores = canary_scores(model, canaries, from_logits=from_logits,
                         batch_size=batch_size)
  box = ("white-box, Dirac" if canaries.kind is CanaryKind.DIRAC
         else f"black-box, {canaries.kind} loss")
  return metrics.one_run_audit_report(
      scores, canaries.included, delta=delta, ledger_epsilon=ledger_epsilon,
      attack=f"one-run audit ({box})", alpha=alpha, guesses=guesses)
