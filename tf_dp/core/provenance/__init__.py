"""Which rows of a traced computation's tensors are examples, by provenance.

* ``labels``: what a tensor may depend on, row by row (public, rows by
  example, or mixed);
* ``op_rules``: the allowlist: how each known operation carries rows;
* ``walker``: labels a traced computation operation by operation, function
  bodies and control flow included, and lists data-dependent writes.

Used by the Keras privacy gate (``tf_dp.keras.privacy_gate``).
"""
