"""TF Privacy's ``privacy.optimizers`` modules: ``tf_dp.DPOptimizer`` behind them."""
