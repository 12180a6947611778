"""How many workers (hosts) a ``tf.distribute`` strategy spans.

Over several, each worker runs its own copy of the program: what one
process draws (noise, lots) is not what another draws unless it is shared.
Mechanisms and the front ends above them ask here.
"""

from typing import Any


def strategy_workers(strategy: Any) -> int:
  """The chief and worker tasks of ``strategy``'s cluster; 1 for a
  strategy without one (the default strategy, ``MirroredStrategy``)."""
  resolver = getattr(strategy, "cluster_resolver", None)
  if resolver is None:
    return 1
  spec = resolver.cluster_spec().as_dict()
  return max(1, sum(len(spec.get(job, ())) for job in ("chief", "worker")))
