"""The framework-neutral DP step, shared by every front end.

* ``config``: the validated ``DPConfig`` (what the step does).

The Keras front end (``tf_dp.keras``) and the Estimator optimizers
(``tf_dp.estimator``) build their configuration here. Nothing in this
package imports Keras.
"""
