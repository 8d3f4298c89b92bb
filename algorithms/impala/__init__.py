"""IMPALA: V-trace, losses, models, and the synchronous and asynchronous modes.

    >>> from batchenv.algorithms.impala import AsyncTrainer, ImpalaConfig, SyncTrainer
    >>> trainer = SyncTrainer(ImpalaConfig(env="CartPole-v1", num_actors=2))  # doctest: +SKIP
    >>> result = trainer.train()  # doctest: +SKIP
    >>> config = ImpalaConfig(env="CartPole-v1", mode="async", envs_per_actor=16)
    >>> result = AsyncTrainer(config).train()  # doctest: +SKIP

The names load on first use, so ``import batchenv.algorithms.impala.cli`` stays light.
"""

from importlib import import_module

_LAZY = {
    "ImpalaConfig": "batchenv.algorithms.impala.config",
    "SyncTrainer": "batchenv.algorithms.impala.sync",
    "SyncResult": "batchenv.algorithms.impala.sync",
    "AsyncTrainer": "batchenv.algorithms.impala.async_mode",
    "TrainResult": "batchenv.algorithms.impala.trainer",
    "ActorDiedError": "batchenv.algorithms.impala.errors",
    "ActorTimeoutError": "batchenv.algorithms.impala.errors",
    "learn": "batchenv.algorithms.impala.learner",
    "make_optimizer": "batchenv.algorithms.impala.learner",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'batchenv.algorithms.impala' has no attribute {name!r}")


__all__ = sorted(_LAZY)
