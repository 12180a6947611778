"""Old home of the Keras flavour detection, now ``tf_dp.keras.backend``.

Kept for one release: each name warns with a ``DeprecationWarning`` naming
its new home (``keras3`` is ``backend.keras3_module``, ``keras2`` is
``backend.keras2_module``; ``flavor_of`` and ``module_for`` kept their
names).
"""

from tf_dp.analysis import deprecation

__getattr__ = deprecation.module_getattr(__name__, {
    "keras3": ("tf_dp.keras.backend", "keras3_module"),
    "keras2": ("tf_dp.keras.backend", "keras2_module"),
    "flavor_of": ("tf_dp.keras.backend", "flavor_of"),
    "module_for": ("tf_dp.keras.backend", "module_for"),
})
