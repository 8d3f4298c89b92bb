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

Importing this package never imports torch: workers import it.
"""

from batchenv.workers.external_process import ExternalProcess
from batchenv.workers.transport import Results, Transport

__all__ = ["ExternalProcess", "Results", "Transport"]
