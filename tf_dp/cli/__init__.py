"""Command-line tools (console scripts of ``setup.py``), apart from the
library so that no module shadows a function of the same name.

* ``tf_dp-compute-dp-sgd-privacy`` (``compute_dp_sgd_privacy``): epsilon of
  a DP-SGD run;
* ``tf_dp-compute-noise-multiplier`` (``compute_noise_multiplier``): the
  noise multiplier that meets a target epsilon.

Each is also ``python -m tf_dp.cli.<module>``; the flags that describe a
DP-SGD run are shared (``run_flags``). The functions they call are
``tf_dp.analysis.compute_dp_sgd_privacy`` and
``tf_dp.analysis.compute_noise_multiplier``.
"""
