"""TF Privacy's ``privacy.dp_query`` modules: tf_dp's ``DPQuery`` classes."""
