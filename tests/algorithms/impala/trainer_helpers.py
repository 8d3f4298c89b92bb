"""Settings and checks shared by the IMPALA trainer tests (test_trainers.py, test_async.py)."""

from __future__ import annotations

import threading

from batchenv.algorithms.impala.async_mode import AsyncTrainer
from batchenv.algorithms.impala.config import ImpalaConfig
from batchenv.algorithms.impala.sync import SyncTrainer

TRAINERS = {"sync": SyncTrainer, "async": AsyncTrainer}


def small_config(mode: str = "sync", **changes) -> ImpalaConfig:
    """2 actors x 2 CountingEnvs, T=5, B=2, 400 steps; ``changes`` override."""
    values = dict(
        env="CountingEnv",
        mode=mode,
        num_actors=2,
        envs_per_actor=2,
        unroll_length=5,
        batch_size=2,
        total_steps=400,
        log_interval=0.2,
        start_timeout=60.0,
    )
    values.update(changes)
    return ImpalaConfig(**values)


def check_accounting(result, batch_size: int = 2) -> None:
    """No unroll consumed twice, none lost: produced = consumed + still queued."""
    ids = result.consumed_ids
    assert len(ids) == len(set(ids)) == result.consumed_unrolls
    assert result.produced_unrolls == result.consumed_unrolls + result.leftover_unrolls
    assert result.consumed_unrolls == result.learner_steps * batch_size


def trainer_threads_left() -> list[str]:
    """Names of actor, inference and learner threads still running (none after train())."""
    prefixes = ("actor-", "inference-", "learner-")
    return [t.name for t in threading.enumerate() if t.name.startswith(prefixes)]
