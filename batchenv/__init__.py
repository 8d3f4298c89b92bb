"""batchenv: fast batched reinforcement-learning simulation.

Importing ``batchenv`` is cheap and never imports torch: worker processes import this
package, and they must start fast and small. The torch-based pieces (``simulate``,
``InGraphBatchEnv``, ...) load on first access.

    >>> import batchenv
    >>> env = batchenv.make("CartPole-v1", num_envs=8)
    >>> observ, infos = env.reset(seed=0)
    >>> observ.shape
    (8, 4)
    >>> env.close()
"""

from importlib import import_module

from batchenv.batch_env import BatchEnv
from batchenv.errors import (
    AlreadyPendingCallError,
    BatchEnvError,
    ClosedError,
    EnvWorkerError,
    NoPendingCallError,
    NotResetError,
    WorkerDiedError,
    WorkerTimeoutError,
)
from batchenv.make import make
from batchenv.workers.external_process import ExternalProcess

__version__ = "0.1.0"

_LAZY = {
    "InGraphBatchEnv": "batchenv.in_graph.in_graph_batch_env",
    "simulate": "batchenv.in_graph.simulate",
    "rollout": "batchenv.in_graph.rollout",
    "StackedEnv": "batchenv.in_graph.stacked_env",
    "Algorithm": "batchenv.in_graph.algorithm",
    "RandomAlgorithm": "batchenv.in_graph.algorithm",
    "InGraphEnv": "batchenv.in_graph.env",
    "BatchVectorEnv": "batchenv.vector",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'batchenv' has no attribute {name!r}")


__all__ = [
    "AlreadyPendingCallError",
    "BatchEnv",
    "BatchEnvError",
    "ClosedError",
    "EnvWorkerError",
    "ExternalProcess",
    "NoPendingCallError",
    "NotResetError",
    "WorkerDiedError",
    "WorkerTimeoutError",
    "make",
    *_LAZY,
]
