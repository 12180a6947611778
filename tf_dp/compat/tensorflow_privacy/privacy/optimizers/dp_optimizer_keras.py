"""TF Privacy's ``dp_optimizer_keras``: ``tf_dp.DPOptimizer`` behind its names.

``DPKerasSGDOptimizer(l2_norm_clip, noise_multiplier, num_microbatches=None,
gradient_accumulation_steps=1, *args, **kwargs)`` and its Adam and Adagrad
siblings keep TF Privacy's arguments (``*args`` and ``**kwargs`` go to the
Keras optimizer, e.g. ``learning_rate``) and return a ``tf_dp.DPOptimizer``
around ``tf.keras.optimizers.SGD`` (``Adam``, ``Adagrad``). What changes:

* ``tf.keras.Model.compile`` given one of these optimizers converts the
  model with ``tf_dp.keras.make_private`` (TF Privacy computed a jacobian
  inside ``minimize``; Keras 3 never shows an optimizer per-example
  losses, so tf_dp's step replaces the model's). The first optimizer made
  installs that conversion: make it before the ``compile`` call, as TF
  Privacy's tutorials do (made inside the call's arguments, the first
  step fails, weights unchanged, with that fix). A model of another Keras
  (``tf_keras`` beside Keras 3) must be converted by hand before
  ``compile``; unconverted, it fails at its first step, weights unchanged,
  with that fix.
* ``population_size`` (keyword only), the number of training examples that
  the ledger (``optimizer.ledger``) accounts privacy with, is taken from
  the arrays ``fit`` trains on; with a ``tf.data`` pipeline or a custom
  loop, pass ``population_size=len(x_train)`` (the first step otherwise
  fails, weights unchanged, naming that fix).
* Noise is added once per lot of ``gradient_accumulation_steps`` batches;
  TF Privacy added it to every batch (sqrt(k) times more noise for the same
  noise_multiplier). A warning says so when k > 1.
* The loss's reduction does not matter: ``make_private`` computes each
  example's loss itself (TF Privacy needed ``reduction=NONE``; with a
  reduced loss and ``num_microbatches=1`` it silently clipped the whole
  batch as one record).
* The functions return optimizer objects, not classes: ``isinstance`` and
  subclassing of ``DPKerasSGDOptimizer`` do not apply.
* TensorFlow 2 behaviour only: after ``tf.compat.v1.disable_v2_behavior()``
  (TF Privacy's classification notebook) they refuse to be made, naming
  the fix (remove that call; ``fit`` still runs a compiled graph).
"""

import functools
import math
import warnings

from tf_dp.compat.tensorflow_privacy import _callers
from tf_dp.core import config as config_lib
from tf_dp.keras import optimizer as optimizer_lib
from tf_dp.keras import private_model

ACCUMULATION_WARNING = (
    "gradient_accumulation_steps={k}: tf_dp adds noise of stddev "
    "noise_multiplier * l2_norm_clip once per lot of {k} batches, where TF "
    "Privacy added it to every batch (an effective noise multiplier "
    "noise_multiplier * sqrt({k}) = {effective:.4g} per lot). The ledger "
    "accounts what tf_dp does; to keep TF Privacy's noise, pass "
    "noise_multiplier={effective:.4g}.")


def _dp_optimizer(constructor, keras_optimizer_cls, l2_norm_clip,
                  noise_multiplier, num_microbatches,
                  gradient_accumulation_steps, args, kwargs):
  """A ``tf_dp.DPOptimizer`` around ``keras_optimizer_cls(*args, **kwargs)``
  whose refusals name ``constructor`` (TF Privacy's name for it)."""
  population_size = kwargs.pop("population_size", None)
  sampling = kwargs.pop("sampling", "shuffled")
  if (isinstance(gradient_accumulation_steps, int)
      and gradient_accumulation_steps > 1 and noise_multiplier):
    warnings.warn(ACCUMULATION_WARNING.format(
        k=gradient_accumulation_steps,
        effective=noise_multiplier * math.sqrt(gradient_accumulation_steps)),
                  UserWarning, stacklevel=3)
  optimizer = optimizer_lib.from_dp_config(
      keras_optimizer_cls(*args, **kwargs), config_lib.DPConfig(
          l2_norm_clip=l2_norm_clip, noise_multiplier=noise_multiplier,
          num_microbatches=num_microbatches,
          gradient_accumulation_steps=gradient_accumulation_steps,
          population_size=population_size, sampling=sampling,
          caller=_callers.keras_optimizer(constructor)))
  optimizer._tf_dp_convert_on_compile = True  # pylint: disable=protected-access
  _convert_models_on_compile()
  return optimizer


def _convert_models_on_compile():
  """Makes ``tf.keras.Model.compile`` (once) convert its model with
  ``make_private`` when it is given an optimizer of this module; any other
  ``compile`` call is unchanged.

  The wrapper replaces ``compile`` on the class that defines it (Keras 3's
  ``Trainer``, tf-keras's ``Model``), not on ``tf.keras.Model``: Keras 3
  skips compiling a loaded model whose class's ``compile`` differs from
  ``Trainer.compile``, so wrapping a subclass would leave every model
  loaded afterwards in the process without its optimizer.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  model_class = next(c for c in tf.keras.Model.__mro__
                     if "compile" in vars(c))
  if getattr(model_class.compile, "converts_for_tf_dp", False):
    return
  keras_compile = model_class.compile

  @functools.wraps(keras_compile)
  def compile(self, optimizer="rmsprop", *args, **kwargs):  # pylint: disable=redefined-builtin,keyword-arg-before-vararg
    if (getattr(optimizer, "_tf_dp_convert_on_compile", False)
        and not private_model.is_private(self)):
      private_model.make_private(self)
    return keras_compile(self, optimizer, *args, **kwargs)

  setattr(compile, "converts_for_tf_dp", True)  # Read back above.
  model_class.compile = compile


def make_keras_optimizer_class(cls):
  """TF Privacy's factory: a function that builds DP versions of ``cls``.

  Args:
    cls: A Keras optimizer class (e.g. ``tf.keras.optimizers.RMSprop``).

  Returns:
    A function ``(l2_norm_clip, noise_multiplier, num_microbatches=None,
    gradient_accumulation_steps=1, *args, population_size=None, **kwargs)``
    returning ``tf_dp.DPOptimizer(cls(*args, **kwargs), ...)`` (see the
    module docstring for the privacy contract and the differences).

  Example:
    >>> DPRMSprop = make_keras_optimizer_class(tf.keras.optimizers.RMSprop)
    >>> opt = DPRMSprop(1.0, 1.1, learning_rate=0.01, population_size=60000)
  """
  name = "DPKeras" + cls.__name__ + "Optimizer"

  def dp_optimizer(l2_norm_clip, noise_multiplier, num_microbatches=None,  # pylint: disable=keyword-arg-before-vararg
                   gradient_accumulation_steps=1, *args, **kwargs):
    return _dp_optimizer(name, cls, l2_norm_clip, noise_multiplier,
                         num_microbatches, gradient_accumulation_steps, args,
                         kwargs)

  dp_optimizer.__name__ = dp_optimizer.__qualname__ = name
  dp_optimizer.__doc__ = (f"``tf_dp.DPOptimizer`` around ``{cls.__name__}``; "
                          "see ``make_keras_optimizer_class``.")
  return dp_optimizer


def _keras_optimizers():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf.keras.optimizers


def DPKerasSGDOptimizer(l2_norm_clip, noise_multiplier, num_microbatches=None,  # pylint: disable=invalid-name,keyword-arg-before-vararg
                        gradient_accumulation_steps=1, *args, **kwargs):
  """DP-SGD: ``tf_dp.DPOptimizer(tf.keras.optimizers.SGD(*args, **kwargs))``.

  Privacy contract: each record's gradient (one example, or a microbatch of
  ``batch_size / num_microbatches`` examples) is clipped to ``l2_norm_clip``;
  N(0, (noise_multiplier * l2_norm_clip)^2) is added to the sum once per lot
  of ``gradient_accumulation_steps`` batches; the ledger records each lot
  (see ``tf_dp.DPOptimizer``).

  Args:
    l2_norm_clip, noise_multiplier, num_microbatches,
      gradient_accumulation_steps: As TF Privacy's.
    *args: Passed to ``tf.keras.optimizers.SGD``.
    **kwargs: Passed to ``tf.keras.optimizers.SGD``, except
      ``population_size``: the number of training examples (inferred
      from the arrays given to ``fit`` when left out), and ``sampling``
      (``tf_dp.DPOptimizer``'s: ``"fixed_order"`` for
      ``fit(..., shuffle=False)``).

  Returns:
    A ``tf_dp.DPOptimizer``; ``tf.keras.Model.compile`` converts the model
    it is compiled into with ``tf_dp.keras.make_private``.

  Raises:
    ValueError: on an invalid argument.
    RuntimeError: with TensorFlow 2 behaviour off
      (``tf.compat.v1.disable_v2_behavior()``, as TF Privacy's
      classification notebook runs), naming the fix.

  Example:
    >>> model.compile(optimizer=DPKerasSGDOptimizer(
    ...     l2_norm_clip=1.0, noise_multiplier=1.1, learning_rate=0.1,
    ...     population_size=len(x_train)), loss="mse")
  """
  return _dp_optimizer("DPKerasSGDOptimizer", _keras_optimizers().SGD,
                       l2_norm_clip, noise_multiplier, num_microbatches,
                       gradient_accumulation_steps, args, kwargs)


def DPKerasAdamOptimizer(l2_norm_clip, noise_multiplier, num_microbatches=None,  # pylint: disable=invalid-name,keyword-arg-before-vararg
                         gradient_accumulation_steps=1, *args, **kwargs):
  """``DPKerasSGDOptimizer`` with ``tf.keras.optimizers.Adam``: same contract,
  arguments and errors."""
  return _dp_optimizer("DPKerasAdamOptimizer", _keras_optimizers().Adam,
                       l2_norm_clip, noise_multiplier, num_microbatches,
                       gradient_accumulation_steps, args, kwargs)


def DPKerasAdagradOptimizer(l2_norm_clip, noise_multiplier,  # pylint: disable=invalid-name,keyword-arg-before-vararg
                            num_microbatches=None,
                            gradient_accumulation_steps=1, *args, **kwargs):
  """``DPKerasSGDOptimizer`` with ``tf.keras.optimizers.Adagrad``: same
  contract, arguments and errors."""
  return _dp_optimizer("DPKerasAdagradOptimizer",
                       _keras_optimizers().Adagrad, l2_norm_clip,
                       noise_multiplier, num_microbatches,
                       gradient_accumulation_steps, args, kwargs)
