"""TF Privacy's ``dp_optimizer``: compat.v1 DP optimizers (Estimator, Session).

``DPGradientDescentGaussianOptimizer(l2_norm_clip, noise_multiplier,
num_microbatches=None, unroll_microbatches=False, *args, **kwargs)`` and
its Adam, Adagrad, RMSProp and Ftrl siblings, and ``DPGradientDescentOptimizer
(dp_sum_query, num_microbatches=None, unroll_microbatches=False,
while_loop_parallel_iterations=10, *args, **kwargs)`` and its siblings,
return ``tf_dp.estimator`` optimizers around the same
``tf.compat.v1.train`` optimizer (``*args``, ``**kwargs``: its arguments,
e.g. ``learning_rate``). What changes:

* ``population_size=`` (keyword), the number of training examples the
  ledger accounts with, is required: an Estimator input has no length to
  take it from.
* ``unroll_microbatches`` and ``while_loop_parallel_iterations`` are
  accepted and ignored: tf_dp computes the records' gradients with
  ``tf.vectorized_map``.
* The loss may be ``[batch]`` or ``[batch, ...]`` (a language model's
  ``[batch, time]``): each example's loss is its mean over the other axes.
* ``dp_sum_query`` must be a tf_dp query (``tf_dp.compat.
  tensorflow_privacy`` queries are); the ledger is the optimizer's own,
  saved in the checkpoint (``tf_dp.estimator.ledger_from_checkpoint``).
* The functions return optimizer objects, not classes.
* Graph mode only (an Estimator ``model_fn``, a ``tf.compat.v1``
  Session): TF Privacy's eager use (a loss callable, a loss computed
  eagerly) is refused, naming the Keras optimizers to use instead.
* Refusals name the function called (``DPGradientDescentGaussianOptimizer
  (..., population_size=...)``) and TF Privacy's ``dp_sum_query``.

Privacy contract: that of ``tf_dp.estimator.DPGradientDescentOptimizer``:
each record's gradient (an example, or a microbatch's mean) is clipped to
``l2_norm_clip``, N(0, (noise_multiplier * l2_norm_clip)^2) is added to the
sum once per step, and each step is one ledger sample.
"""

from tf_dp.compat.tensorflow_privacy import _callers


def _v1_train():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf.compat.v1.train


def make_gaussian_optimizer_class(cls):
  """TF Privacy's factory: a function building Gaussian DP versions of the
  ``tf.compat.v1.train`` optimizer class ``cls`` (see the module
  docstring)."""
  name = f"DP{cls.__name__.replace('Optimizer', '')}GaussianOptimizer"

  def dp_optimizer(l2_norm_clip, noise_multiplier, num_microbatches=None,  # pylint: disable=keyword-arg-before-vararg
                   unroll_microbatches=False, *args, population_size=None,
                   **kwargs):
    del unroll_microbatches
    from tf_dp.estimator import dp_optimizer_v1  # pylint: disable=g-import-not-at-top
    return dp_optimizer_v1.dp_optimizer_class(cls)(
        l2_norm_clip, noise_multiplier, population_size, *args,
        num_microbatches=num_microbatches,
        caller=_callers.v1_optimizer(name), **kwargs)

  dp_optimizer.__name__ = dp_optimizer.__qualname__ = name
  return dp_optimizer


def make_optimizer_class(cls):
  """TF Privacy's factory: a function building DP versions of ``cls``
  around a query (``dp_sum_query``; see the module docstring)."""
  name = f"DP{cls.__name__}"

  def dp_optimizer(dp_sum_query, num_microbatches=None,  # pylint: disable=keyword-arg-before-vararg
                   unroll_microbatches=False,
                   while_loop_parallel_iterations=10, *args,
                   population_size=None, **kwargs):
    del unroll_microbatches, while_loop_parallel_iterations
    from tf_dp.estimator import dp_optimizer_v1  # pylint: disable=g-import-not-at-top
    return dp_optimizer_v1.dp_optimizer_class(cls)(
        None, None, population_size, *args, num_microbatches=num_microbatches,
        dp_query=dp_sum_query, caller=_callers.v1_optimizer(name), **kwargs)

  dp_optimizer.__name__ = dp_optimizer.__qualname__ = name
  return dp_optimizer


_BASES = ("GradientDescentOptimizer", "AdamOptimizer", "AdagradOptimizer",
          "RMSPropOptimizer", "FtrlOptimizer")


def __getattr__(name):
  """``DP<Base>`` and ``DP<Base minus 'Optimizer'>GaussianOptimizer``, built
  on first use (TensorFlow is imported then, not with this module)."""
  for base in _BASES:
    if name == "DP" + base:
      value = make_optimizer_class(getattr(_v1_train(), base))
    elif name == f"DP{base[:-len('Optimizer')]}GaussianOptimizer":
      value = make_gaussian_optimizer_class(getattr(_v1_train(), base))
    else:
      continue
    globals()[name] = value
    return value
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
