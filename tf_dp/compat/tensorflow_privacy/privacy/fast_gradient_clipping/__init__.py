"""TF Privacy's ``fast_gradient_clipping`` package: its default registry."""
