"""The asynchronous mode's own guarantees (test_trainers.py runs the shared ones on both
modes): every unroll consumed once, failed env groups seen at once and restarted within a
budget, typed errors naming actor, env and exit code, no hangs (also when inference fails),
Ctrl-C stops everything. tests/conftest.py fails any test that leaves a process."""

from __future__ import annotations

import functools
import time
from pathlib import Path

import pytest
import torch

from batchenv.algorithms.impala.actor_pool import prestart
from batchenv.algorithms.impala.async_mode import AsyncTrainer
from batchenv.algorithms.impala.batcher import BatcherError
from batchenv.algorithms.impala.config import ImpalaConfig
from batchenv.algorithms.impala.errors import ActorDiedError
from batchenv.errors import EnvWorkerError, RemoteTraceback, WorkerDiedError
from tests.algorithms.impala.impala_envs import CountingEnv, FaultAfterEnv
from tests.algorithms.impala.trainer_helpers import (
    check_accounting,
    small_config,
    trainer_threads_left,
)

prestart()  # the fork server and resource tracker outlive every test (see test_sync.py)

ROOT = Path(__file__).resolve().parents[3]


def _config(**changes) -> ImpalaConfig:
    return small_config("async", **changes)


def test_every_unroll_is_consumed_once_and_every_thread_ends() -> None:
    trainer = AsyncTrainer(_config(), env=functools.partial(CountingEnv, 10), record_unrolls=True)
    result = trainer.train()
    assert result.steps == 400 and result.learner_steps == 40
    check_accounting(result)
    assert result.actor_restarts == 0 and result.abandoned_unrolls == 0
    # CountingEnv(10) episodes last 10 steps; every consumed unroll has 5 of them.
    assert result.episodes == pytest.approx(result.consumed_unrolls * 5 / 10, abs=4)
    # Unroll ids: actor, incarnation 0, and per env the sequence numbers 0, 2, 4 ...
    by_actor = {a: sorted(s for actor, _, s in result.consumed_ids if actor == a) for a in (0, 1)}
    assert all(seqs and seqs == sorted(set(seqs)) for seqs in by_actor.values())
    assert trainer.inference_rows > 0 and trainer.inference_batches > 0
    assert trainer_threads_left() == []


def test_inference_batches_steps_of_several_actors() -> None:
    config = _config(num_actors=4, envs_per_actor=1, batch_size=4, total_steps=2000)
    trainer = AsyncTrainer(config, env=functools.partial(CountingEnv, 10))
    trainer.train()
    # Four actors with one env each: some inference batches served more than one actor.
    assert trainer.inference_rows > trainer.inference_batches


def test_rows_of_an_unroll_follow_monobeast_layout() -> None:
    # CountingEnv observes [t / 10, last action]: row t + 1's frame repeats its last_action,
    # reward is 1 exactly for action 1, and the episode step counts the frames.
    trainer = AsyncTrainer(_config(total_steps=40), env=functools.partial(CountingEnv, 10))
    batches = []
    original = trainer._learn_on

    def spy(batch, core, unroll_ids):
        batches.append({key: value.clone() for key, value in batch.items()})
        original(batch, core, unroll_ids)

    trainer._learn_on = spy
    trainer.train()
    for batch in batches:
        frame, action = batch["frame"], batch["action"]
        running = ~batch["done"]  # a finished episode's row holds the next one's first frame
        torch.testing.assert_close(
            frame[1:, :, 1][running[1:]], batch["last_action"][1:][running[1:]].float()
        )
        torch.testing.assert_close(batch["last_action"][1:], action[1:])
        torch.testing.assert_close(batch["reward"][1:], (action[1:] == 1).float())
        # The episode step counter equals 10 * frame[0] until the episode ends.
        torch.testing.assert_close(
            batch["episode_step"][running].float(), (frame[..., 0][running] * 10).round()
        )


def test_restart_budget_exceeded_raises_actor_died_error() -> None:
    env = functools.partial(FaultAfterEnv, "raise", at_step=3)
    started = time.monotonic()
    with pytest.raises(ActorDiedError) as caught:
        AsyncTrainer(_config(max_actor_restarts=1, num_actors=1, batch_size=1), env=env).train()
    error = caught.value
    assert isinstance(error, WorkerDiedError)
    message = str(error)
    assert message.startswith("actor 0 (env FaultAfterEnv('raise'), incarnation 1) lost its envs")
    assert "planned failure at step 3" in message
    assert "1 restarts already spent (max_actor_restarts=1)" in message
    assert error.worker == 0 and error.restarts == 1
    assert error.env_description == "FaultAfterEnv('raise')"
    # The env group's error (worker, env and step) is the cause; then the env's own
    # exception, re-created with its type, and its remote traceback.
    env_error = error.__cause__
    assert isinstance(env_error, EnvWorkerError)
    assert env_error.worker == 0 and env_error.env_index == 0 and env_error.step == 2
    assert type(env_error.__cause__) is RuntimeError
    assert isinstance(env_error.__cause__.__cause__, RemoteTraceback)
    assert "RuntimeError: FaultAfterEnv: planned failure" in env_error.__cause__.__cause__.text
    assert time.monotonic() - started < 60
    assert trainer_threads_left() == []


def test_failing_inference_stops_training_without_stranding_actors() -> None:
    trainer = AsyncTrainer(_config(total_steps=10**6), env=functools.partial(CountingEnv, 10))

    def broken(*args, **kwargs):
        raise FloatingPointError("inference exploded")

    trainer.acting_model.forward = broken
    started = time.monotonic()
    with pytest.raises(FloatingPointError, match="inference exploded"):
        trainer.train()
    assert time.monotonic() - started < 30
    assert trainer_threads_left() == []


def test_an_actor_told_its_batch_failed_reports_it() -> None:
    # BatcherError in an actor while training runs is not swallowed.
    trainer = AsyncTrainer(_config(total_steps=10**6), env=functools.partial(CountingEnv, 10))
    original = trainer._inference_thread

    def drop_one_batch() -> None:
        batch = next(iter(trainer.batcher))
        del batch  # dropped without outputs: its callers get BatcherError
        original()

    trainer._inference_thread = drop_one_batch
    with pytest.raises(BatcherError):
        trainer.train()
    assert trainer_threads_left() == []


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
def test_unavailable_device_is_refused() -> None:
    with pytest.raises(ValueError, match="device='cuda' but CUDA is not available"):
        AsyncTrainer(_config(device="cuda"), env=functools.partial(CountingEnv, 10))
