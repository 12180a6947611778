"""TF Privacy's ``tensorflow_privacy.privacy`` package paths, mapped onto tf_dp."""
