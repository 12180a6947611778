"""TF Privacy's ``privacy.keras_models`` modules: ``make_private`` behind them."""
