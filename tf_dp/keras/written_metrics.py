"""Keras's training metric totals are never written to a file.

Keras keeps the running totals of the loss and metrics it reports (a
``Mean``'s ``total`` and ``count``, an accuracy's correct count) in
variables: un-noised sums over the private examples of the epoch so far.
Keras 2 writes them (its SavedModel, ``tf.saved_model.save`` of a Keras 2
model, its ``.keras`` files), so a private model resets them whenever it is
walked to be written, at the two doors every writer goes through: the
model's ``_trackable_children`` (TF's object graph: SavedModels,
checkpoints, TF-format weights, whatever the API) and its
``save_own_variables`` (Keras's file formats, which save the model's state
before its children's). Files then hold zeros.

A save resets the running averages that Keras reports, as Keras does at the
start of every epoch: one in the middle of an epoch (``ModelCheckpoint``
with an integer ``save_freq``) makes the rest of the epoch's logs average
the batches after it. The logs themselves are not private (the threat
model, docs/privacy/threat_model.md); the private metrics are the optimizer's noised ``dp_*`` ones.
"""

import types
from typing import Any, Dict

import tensorflow as tf


def _reset_training_metrics(model: Any) -> None:
  if tf.executing_eagerly():  # A graph being built runs no assignment.
    model.reset_metrics()


def _children_without_metric_totals(self, save_type: str = "checkpoint",
                                    **kwargs: Any) -> Dict[str, Any]:
  _reset_training_metrics(self)
  return type(self)._trackable_children(self, save_type, **kwargs)  # pylint: disable=protected-access


def _own_variables_without_metric_totals(self, store: Any) -> Any:
  _reset_training_metrics(self)
  return type(self).save_own_variables(self, store)


def never_write_metric_totals(model: Any) -> None:
  """Makes every write of ``model`` reset its training metrics first.

  Privacy contract: no file written from ``model`` (by any API that walks
  its object graph or its Keras state) holds the un-noised totals of the
  loss and metrics Keras computed on private batches.
  """
  # pylint: disable=protected-access
  model._trackable_children = types.MethodType(
      _children_without_metric_totals, model)
  model.save_own_variables = types.MethodType(
      _own_variables_without_metric_totals, model)
