"""TF Privacy's ``dp_optimizer_keras_vectorized``: the same DP optimizers.

TF Privacy's vectorized optimizers computed the per-example gradients of
its Keras optimizers with ``tf.vectorized_map``; ``tf_dp.DPOptimizer``
always computes them per example (fast per-layer rules, else
``tf.vectorized_map``), so ``VectorizedDPKerasSGDOptimizer`` (``Adam``,
``Adagrad``, ``make_vectorized_keras_optimizer_class``) are the functions of
``dp_optimizer_keras``: same arguments, same privacy contract, same
differences from TF Privacy (see there).
"""

from tf_dp.compat.tensorflow_privacy.privacy.optimizers import dp_optimizer_keras

VectorizedDPKerasSGDOptimizer = dp_optimizer_keras.DPKerasSGDOptimizer
VectorizedDPKerasAdamOptimizer = dp_optimizer_keras.DPKerasAdamOptimizer
VectorizedDPKerasAdagradOptimizer = dp_optimizer_keras.DPKerasAdagradOptimizer
make_vectorized_keras_optimizer_class = (
    dp_optimizer_keras.make_keras_optimizer_class)
