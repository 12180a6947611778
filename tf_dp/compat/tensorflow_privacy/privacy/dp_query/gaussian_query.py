"""TF Privacy's ``gaussian_query`` module: tf_dp's ``GaussianSumQuery``.

Same arguments, ``GaussianSumQuery(l2_norm_clip, stddev)``, same result.
Differences: the clip must be a number (a schedule changes the clip in the
global state, not through a ``tf.Variable`` argument), and the noise is
keyed from OS entropy, never from ``tf.random.set_seed``.
"""

from tf_dp.dp_query.gaussian_query import GaussianSumQuery  # pylint: disable=unused-import
