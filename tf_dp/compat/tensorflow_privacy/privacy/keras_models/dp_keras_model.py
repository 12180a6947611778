"""TF Privacy's ``dp_keras_model``: ``DPSequential`` and ``DPModel`` factories.

``DPSequential(l2_norm_clip, noise_multiplier, layers=[...])`` builds a
``tf.keras.Sequential`` (``DPModel(..., inputs=..., outputs=...)`` a
functional ``tf.keras.Model``), converts it with
``tf_dp.keras.make_private`` and remembers the clip and noise, so that
``compile(optimizer=<a plain Keras optimizer>)`` compiles a
``tf_dp.DPOptimizer`` around that optimizer. What changes against TF
Privacy:

* ``population_size`` (the number of training examples), given here or to
  ``compile``, is taken from the arrays ``fit`` trains on when left out;
  with a ``tf.data`` pipeline it must be given (the first step otherwise
  fails, weights unchanged, naming the fix).
* They are functions returning a converted Keras model, not classes:
  subclass ``tf.keras.Model`` and call ``make_private`` instead of
  subclassing ``DPModel``.
* ``use_xla`` is accepted and ignored (``compile(jit_compile=...)``
  decides); ``layer_registry`` may be None or TF Privacy's default
  registry (``make_default_layer_registry()``): tf_dp picks its fast
  clipping rules itself (``tf_dp.keras.fast``).
"""

import types

from tf_dp.compat.tensorflow_privacy import _callers
from tf_dp.compat.tensorflow_privacy.privacy.fast_gradient_clipping import layer_registry as layer_registry_lib
from tf_dp.core import config as config_lib
from tf_dp.keras import backend
from tf_dp.keras import dp_engine
from tf_dp.keras import optimizer as optimizer_lib
from tf_dp.keras import optimizer_base
from tf_dp.keras import private_model

def _dp_compile(self, optimizer="rmsprop", *args, population_size=None,  # pylint: disable=keyword-arg-before-vararg
                **kwargs):
  """``compile`` that wraps a plain optimizer in a ``tf_dp.DPOptimizer``."""
  dp = self._tf_dp_compat_config  # pylint: disable=protected-access
  if not optimizer_base.is_dp_optimizer(optimizer):
    if isinstance(optimizer, str):
      optimizer = backend.default().get_optimizer(optimizer)
    optimizer = optimizer_lib.from_dp_config(optimizer, config_lib.DPConfig(
        l2_norm_clip=dp.l2_norm_clip, noise_multiplier=dp.noise_multiplier,
        num_microbatches=dp.num_microbatches,
        population_size=population_size or dp.population_size,
        caller=dp.caller))
  return type(self).compile(self, optimizer, *args, **kwargs)


def _make_dp(constructor, model, l2_norm_clip, noise_multiplier,
             num_microbatches, layer_registry, population_size):
  if layer_registry is not None and not isinstance(
      layer_registry, layer_registry_lib.LayerRegistry):
    raise ValueError(
        "layer_registry is TF Privacy's fast-clipping registry; tf_dp "
        "chooses fast per-layer rules itself (register user layers with "
        "tf_dp.keras.fast). Pass layer_registry=None (or TF Privacy's "
        "make_default_layer_registry(), which means the same).")
  if isinstance(num_microbatches, bool):
    raise ValueError("num_microbatches must be None or an integer; got a "
                     "bool (did you mean use_xla?).")
  model = private_model.make_private(model)
  model._tf_dp_compat_config = types.SimpleNamespace(  # pylint: disable=protected-access
      l2_norm_clip=l2_norm_clip, noise_multiplier=noise_multiplier,
      num_microbatches=num_microbatches, population_size=population_size,
      caller=_callers.keras_model(constructor))
  model.compile = types.MethodType(_dp_compile, model)
  return model


def DPSequential(l2_norm_clip, noise_multiplier, num_microbatches=None,  # pylint: disable=invalid-name,keyword-arg-before-vararg
                 use_xla=True, layer_registry=None, *args,
                 population_size=None, **kwargs):
  """A ``tf.keras.Sequential(*args, **kwargs)`` converted for DP-SGD.

  Privacy contract: that of ``tf_dp.DPOptimizer`` with these
  ``l2_norm_clip``, ``noise_multiplier`` and ``num_microbatches``, compiled
  by ``compile`` around the optimizer it receives.

  Args:
    l2_norm_clip, noise_multiplier, num_microbatches: As TF Privacy's.
    use_xla: Ignored (kept for TF Privacy's signature).
    layer_registry: None, or ``make_default_layer_registry()`` (the same).
    *args, **kwargs: Passed to ``tf.keras.Sequential`` (e.g. ``layers``).
    population_size: Number of training examples (here or to ``compile``).

  Returns:
    The converted model; its ``compile`` accepts ``population_size=``.

  Raises:
    ValueError: for ``layer_registry``, a bool ``num_microbatches``, or a
      layer ``make_private`` refuses (with the fix); from ``compile``
      without ``population_size``.
    RuntimeError: with TensorFlow 2 behaviour off
      (``tf.compat.v1.disable_v2_behavior()``), naming the fix.

  Example:
    >>> model = DPSequential(l2_norm_clip=1.0, noise_multiplier=1.1,
    ...                      layers=[tf.keras.layers.Dense(10)],
    ...                      population_size=60000)
    >>> model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse")
  """
  del use_xla
  dp_engine.require_eager_execution("DPSequential")
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return _make_dp("DPSequential", tf.keras.Sequential(*args, **kwargs),
                  l2_norm_clip,
                  noise_multiplier, num_microbatches, layer_registry,
                  population_size)


def DPModel(l2_norm_clip, noise_multiplier, num_microbatches=None,  # pylint: disable=invalid-name,keyword-arg-before-vararg
            use_xla=True, layer_registry=None, *args, population_size=None,
            **kwargs):
  """A functional ``tf.keras.Model(*args, **kwargs)`` converted for DP-SGD.

  Same contract, arguments and errors as ``DPSequential``; ``*args`` and
  ``**kwargs`` (``inputs=``, ``outputs=``) go to ``tf.keras.Model``.
  """
  del use_xla
  dp_engine.require_eager_execution("DPModel")
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return _make_dp("DPModel", tf.keras.Model(*args, **kwargs), l2_norm_clip,
                  noise_multiplier, num_microbatches, layer_registry,
                  population_size)
