"""The process boundary: worker processes that host envs, and the transports that drive
them from a BatchEnv.

- :mod:`~batchenv.workers.protocol`: the messages and their framing.
- :mod:`~batchenv.workers.server`: the worker process's main loop.
- :mod:`~batchenv.workers.env_group`: a group of envs stepped into shared memory (the
  work of a worker, or of the parent's own share).
- :mod:`~batchenv.workers.autoreset`: the per-row commands and every way an episode resets.
- :mod:`~batchenv.workers.launch`: starting workers (spawn or a fork server).
- :mod:`~batchenv.workers.liveness`: never outliving the parent.
- :mod:`~batchenv.workers.shared_memory`: the shared block's layout.
- :mod:`~batchenv.workers.external_process`: the parent's handle on one worker.
- :mod:`~batchenv.workers.transport`: the ``Transport`` protocol and its ``Results``;
  :mod:`~batchenv.workers.list_transport` and
  :mod:`~batchenv.workers.shared_memory_transport` implement it.
- :mod:`~batchenv.workers.groups`: starting a batch's worker groups over one shared block.
- :mod:`~batchenv.workers.ray_cluster`, :mod:`~batchenv.workers.ray_transport` and
  :mod:`~batchenv.workers.ray_rollouts`: worker groups and samplers as Ray actors.

Importing this package never imports torch: workers import it. Its modules never import
the layer above (``batchenv.make``, the batch envs): that layer drives this one.
"""

from batchenv.workers.external_process import ExternalProcess
from batchenv.workers.transport import Results, Transport

__all__ = ["ExternalProcess", "Results", "Transport"]
