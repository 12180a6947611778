"""The framework-neutral DP step, shared by every front end.

* ``config``: the validated ``DPConfig`` (what the step does);
* ``caller_api``: the constructor the user called, as refusals name it;
* ``vectorized``: per-record gradients to a clipped sum
  (``tf.vectorized_map`` of the query's ``preprocess_record``);
* ``lot``: releasing one lot (noise once, one ledger sample, the
  denominator of the mean);
* ``lot_engine``: the state between batches (the open lot, the query's
  global state, the budget, the ``tf.distribute`` replica merge).

The Keras front end (``tf_dp.keras``) and the Estimator optimizers
(``tf_dp.estimator``) compute per-record gradients their own way and hand
them here. Nothing in this package imports Keras.
"""
