"""TF Privacy's ``privacy.analysis`` modules: tf_dp's accountants behind them."""
