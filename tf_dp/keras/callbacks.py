"""``PrivacyBudget``: report epsilon each epoch, stop before a budget is spent.

Abadi et al.'s ``DPTrain`` loop as a Keras callback. It reads the ledger of
the model's ``DPOptimizer`` (nothing else), so what it reports is what the
accountant would compute after training.
"""

import math

import numpy as np

from tf_dp.analysis import ledger as ledger_accounting
from tf_dp.analysis import rdp as rdp_lib
from tf_dp.analysis.budget import max_additional_steps


class PrivacyBudget:
  """Logs epsilon after each epoch and stops training before a target.

  Works with ``model.fit`` on Keras 3 and Keras 2 (it implements the
  callback interface itself). After each epoch ``logs["epsilon"]`` holds
  the epsilon of everything in the ledger (so it appears in the History and
  in TensorBoard). With ``target_epsilon``, after every batch it checks
  whether one more lot (of the last recorded kind) would exceed the target
  and, if so, sets ``model.stop_training``: epsilon never exceeds the target
  (except when the very first lot already does; then training stops after
  it and ``exceeded`` is True).

  Args:
    delta: The delta of the reported (epsilon, delta).
    target_epsilon: Optional budget.
    orders: Renyi orders for the accountant.
  """

  def __init__(self, delta, target_epsilon=None, orders=None):
    if not 0 < delta < 1:
      raise ValueError(f"delta must lie in (0, 1); got {delta!r}.")
    if target_epsilon is not None and not target_epsilon > 0:
      raise ValueError(f"target_epsilon must be > 0; got {target_epsilon!r}.")
    self.delta = delta
    self.target_epsilon = target_epsilon
    self.orders = list(orders or rdp_lib.DEFAULT_ORDERS)
    self.model = None
    self.params = {}
    self.epsilons = []
    self.exceeded = False
    self._allowed_lots = None
    self.validation_data = None

  # Keras callback interface (duck-typed for Keras 3 and Keras 2).
  def set_model(self, model):
    self.model = model

  def set_params(self, params):
    self.params = params

  def _implements_train_batch_hooks(self):
    return self.target_epsilon is not None

  def _implements_test_batch_hooks(self):
    return False

  def _implements_predict_batch_hooks(self):
    return False

  def __getattr__(self, name):
    if name.startswith("on_"):
      return lambda *args, **kwargs: None
    raise AttributeError(name)

  @property
  def ledger(self):
    ledger = getattr(self.model.optimizer, "ledger", None)
    if ledger is None:
      raise ValueError("PrivacyBudget needs a model compiled with "
                       "tf_dp.DPOptimizer.")
    return ledger

  def _lots(self):
    return int(self.ledger._sample_count.numpy())  # pylint: disable=protected-access

  def epsilon(self):
    return ledger_accounting.compute_epsilon_from_ledger(
        self.ledger, self.delta, self.orders)[0]

  def _plan(self):
    data = ledger_accounting.ledger_as_dict(self.ledger)
    if not data["samples"]:
      return
    spent = ledger_accounting.compute_rdp_from_ledger(data, self.orders)
    last = dict(data, samples=data["samples"][-1:])
    step = ledger_accounting.compute_rdp_from_ledger(last, self.orders)
    more = max_additional_steps(self.orders, spent, step, self.target_epsilon,
                                self.delta)
    self.exceeded = more < 0
    self._allowed_lots = len(data["samples"]) + max(more, 0)

  def on_train_begin(self, logs=None):
    del logs
    self.ledger  # pylint: disable=pointless-statement
    self._allowed_lots = None

  def on_train_batch_end(self, batch, logs=None):
    del batch, logs
    if self.target_epsilon is None:
      return
    if self._allowed_lots is None:
      self._plan()
    if self._allowed_lots is not None and self._lots() >= self._allowed_lots:
      self.model.stop_training = True

  def on_epoch_end(self, epoch, logs=None):
    del epoch
    eps = self.epsilon()
    self.epsilons.append(eps)
    if logs is not None:
      logs["epsilon"] = eps
    if self.target_epsilon is not None:
      self._plan()


del math, np
