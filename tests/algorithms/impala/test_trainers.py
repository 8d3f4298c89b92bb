"""The trainers' guarantees: every unroll consumed once, dead actors seen at once and restarted
within a budget, typed errors naming actor, env and exit code, no hangs, Ctrl-C stops
everything, exact resume. Tests parametrized by ``mode`` run on both trainers; the others are
the synchronous mode's (test_async.py has the asynchronous mode's own).
tests/conftest.py fails any test that leaves a process."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest
import torch

from batchenv.algorithms.impala.actor_pool import prestart
from batchenv.algorithms.impala.config import ImpalaConfig
from batchenv.algorithms.impala.errors import ActorDiedError, ActorTimeoutError
from batchenv.algorithms.impala.sync import SyncTrainer
from batchenv.errors import RemoteTraceback, WorkerDiedError
from batchenv.run_dir import RunDirectory
from tests.algorithms.impala.impala_envs import CountingEnv, FaultAfterEnv, ImageEnv
from tests.algorithms.impala.trainer_helpers import (
    TRAINERS,
    check_accounting,
    small_config,
    trainer_threads_left,
)
from tests.cli_process import python_command

# Actors start from a fork server and use multiprocessing's resource tracker, both living as
# long as this interpreter: start them now so the leftover-process check does not count them.
prestart()

ROOT = Path(__file__).resolve().parents[3]


def _config(**changes) -> ImpalaConfig:
    return small_config("sync", **changes)


def test_every_unroll_is_consumed_once() -> None:
    result = SyncTrainer(
        _config(), env=functools.partial(CountingEnv, 10), record_unrolls=True
    ).train()
    assert result.steps == 400 and result.learner_steps == 40
    check_accounting(result)
    assert result.actor_restarts == 0 and result.abandoned_unrolls == 0
    # Every finished episode of CountingEnv(10) lasted 10 steps: 2 per 10 batches of 2 x 5.
    assert result.episodes > 0


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_log_every_writes_a_row_per_step_interval_and_calls_on_log(mode, tmp_path) -> None:
    # Batches of 10 steps; log_interval is an hour, so every row but the final one comes
    # from log_every: one at the first check at or past each multiple of 100 steps.
    config = small_config(mode, total_steps=1000, log_every=100, log_interval=3600.0)
    seen = []
    with RunDirectory(tmp_path, "impala", config, seed=0) as run:
        TRAINERS[mode](
            config,
            env=functools.partial(CountingEnv, 10),
            run_dir=run,
            on_log=lambda step, row: seen.append((step, row["mean_score"])),
        ).train()
    lines = (tmp_path / "metrics.csv").read_text().split()[1:]
    steps = [int(line.split(",")[0]) for line in lines]
    assert steps[-1] == 1000
    buckets = [step // 100 for step in steps[:-1]]
    assert buckets and buckets == sorted(set(buckets)) and buckets[0] >= 1
    assert seen and {step for step, _ in seen} <= set(steps)
    assert all(0.0 <= score <= 10.0 for _, score in seen)  # CountingEnv(10) returns


def test_actors_can_step_their_envs_in_a_batchenv_worker_group() -> None:
    config = _config(num_actors=1, envs_per_actor=2, env_workers=1, total_steps=100)
    result = SyncTrainer(
        config, env=functools.partial(CountingEnv, 10), record_unrolls=True
    ).train()
    assert result.steps == 100 and result.actor_restarts == 0
    check_accounting(result)


@pytest.mark.parametrize(
    "env, changes",
    [(functools.partial(CountingEnv, 10), {"use_lstm": True}),
     (functools.partial(ImageEnv, 10), {}),
     (functools.partial(ImageEnv, 10), {"precision": "bf16", "use_lstm": True})],
    ids=["mlp-lstm", "atari-net-uint8", "atari-net-lstm-bf16"],
)  # fmt: skip
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_lstm_and_image_agents_train(mode: str, env, changes: dict) -> None:
    config = small_config(mode, total_steps=100, **changes)
    result = TRAINERS[mode](config, env=env, record_unrolls=True).train()
    assert result.steps == 100 and result.learner_steps == 10
    check_accounting(result)


# What the restart warning says: an actor process exited (sync), or an actor's env worker did.
_DEATH_LOG = {"sync": "exit code -9", "async": "lost its envs: worker 0"}


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_actor_killing_itself_is_restarted(mode: str, tmp_path: Path, caplog) -> None:
    env = functools.partial(FaultAfterEnv, "kill", at_step=7, marker=str(tmp_path / "fired"))
    with caplog.at_level("WARNING"):
        # Enough steps that the restarted actor (a new process: a second or more on a busy
        # machine) still has unrolls to make after the other actor's share.
        config = small_config(mode, total_steps=4000)
        result = TRAINERS[mode](config, env=env, record_unrolls=True).train()
    assert result.actor_restarts == 1
    assert result.abandoned_unrolls == 2  # the unroll of both its envs in progress
    assert result.steps == 4000
    check_accounting(result)
    assert {incarnation for _, incarnation, _ in result.consumed_ids} == {0, 1}
    assert _DEATH_LOG[mode] in caplog.text and "restarting it (restart 1 of 3)" in caplog.text


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_sigkill_from_outside_is_detected_within_a_second(mode: str) -> None:
    config = small_config(mode, total_steps=10**9)
    trainer = TRAINERS[mode](config, env=functools.partial(CountingEnv, 10))
    outcome: dict = {}

    def run() -> None:
        try:
            trainer.train()
        except BaseException as error:  # noqa: BLE001 - reported below
            outcome["error"] = error

    thread = threading.Thread(target=run)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while trainer.step < 100 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert trainer.step >= 100, "training did not start"
        victim = trainer.actor_pids(1)[0]
        killed = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        while trainer.counts()["restarts"] == 0 and time.monotonic() - killed < 5:
            time.sleep(0.01)
        assert trainer.counts()["restarts"] == 1
        assert time.monotonic() - killed < 1.0
        steps = trainer.step
        while trainer.step < steps + 200 and time.monotonic() - killed < 60:
            time.sleep(0.05)
        assert trainer.step >= steps + 200  # training goes on with the replacement
        assert trainer.actor_pids(1) and victim not in trainer.actor_pids(1)
    finally:
        trainer.stop()
        thread.join(30)
    assert not thread.is_alive() and "error" not in outcome


def test_restart_budget_exceeded_raises_actor_died_error() -> None:
    env = functools.partial(FaultAfterEnv, "raise", at_step=3)
    started = time.monotonic()
    with pytest.raises(ActorDiedError) as caught:
        SyncTrainer(_config(max_actor_restarts=1, num_actors=1, batch_size=1), env=env).train()
    error = caught.value
    assert isinstance(error, WorkerDiedError)
    message = str(error)
    assert message.startswith("actor 0 (env FaultAfterEnv('raise'), incarnation 1, pid ")
    assert "with exit code 1" in message and "planned failure at step 3" in message
    assert "1 restarts already spent (max_actor_restarts=1)" in message
    assert error.worker == 0 and error.exitcode == 1 and error.restarts == 1
    assert error.env_description == "FaultAfterEnv('raise')"
    assert isinstance(error.__cause__, RemoteTraceback)
    assert "RuntimeError: FaultAfterEnv: planned failure" in error.__cause__.text
    assert time.monotonic() - started < 60


# What each mode says when an actor's envs die or hang past the restart budget: a sync actor
# is a process that steps its envs; an async actor is a thread whose envs live in a worker.
KILLED_MESSAGES = {
    "sync": r"actor 0 .* exited with exit code -9",
    "async": r"actor 0 .* lost its envs: .* died during step .*killed by signal 9",
}
HUNG_MESSAGES = {
    "sync": "actor 0 .* delivered no unroll for 1 s and was killed",
    "async": "actor 0 .* lost its envs",
}


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_killed_actor_past_budget_reports_signal(mode: str) -> None:
    env = functools.partial(FaultAfterEnv, "kill", at_step=3)
    config = small_config(mode, max_actor_restarts=0, num_actors=1, batch_size=1)
    with pytest.raises(ActorDiedError, match=KILLED_MESSAGES[mode]) as caught:
        TRAINERS[mode](config, env=env).train()
    assert caught.value.exitcode == -signal.SIGKILL


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_hung_actor_is_stopped_after_its_deadline(mode: str) -> None:
    # Hangs in its third unroll, after delivering two: actor_timeout (1 s) applies.
    env = functools.partial(FaultAfterEnv, "hang", at_step=12)
    config = small_config(
        mode,
        max_actor_restarts=0,
        num_actors=1,
        envs_per_actor=1,
        batch_size=1,
        actor_timeout=1.0,
        total_steps=10**6,
    )
    started = time.monotonic()
    with pytest.raises(ActorTimeoutError, match=HUNG_MESSAGES[mode]):
        TRAINERS[mode](config, env=env).train()
    assert time.monotonic() - started < 60
    assert trainer_threads_left() == []


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_checkpoint_resume_is_exact(mode: str, tmp_path: Path) -> None:
    config = small_config(mode, total_steps=200)
    with RunDirectory(tmp_path / "run", "impala", config, seed=0, env_id="CountingEnv") as run:
        first = TRAINERS[mode](config, env=functools.partial(CountingEnv, 10), run_dir=run)
        result = first.train()
        checkpoint = run.load_checkpoint()
    assert result.steps == checkpoint["step"] == 200 and checkpoint["learner_steps"] == 20
    assert checkpoint["config"]["mode"] == mode
    assert (tmp_path / "run" / "curve.png").exists()

    longer = config.replace(total_steps=400)
    resumed = TRAINERS[mode](longer, env=functools.partial(CountingEnv, 10), checkpoint=checkpoint)
    state = resumed.state_dict()
    acting = resumed.actor_model if mode == "sync" else resumed.acting_model
    for key, tensor in checkpoint["model"].items():
        torch.testing.assert_close(state["model"][key], tensor, rtol=0, atol=0)
        # The actors act with the restored weights from their first step.
        torch.testing.assert_close(acting.state_dict()[key], tensor, rtol=0, atol=0)
    assert state["optimizer"]["state"].keys() == checkpoint["optimizer"]["state"].keys()
    for index, values in checkpoint["optimizer"]["state"].items():
        torch.testing.assert_close(
            state["optimizer"]["state"][index]["square_avg"], values["square_avg"], rtol=0, atol=0
        )
    assert state["scheduler"]["last_epoch"] == checkpoint["scheduler"]["last_epoch"] == 20
    # The schedule continues where it stopped: lr = 4.8e-4 * (1 - 200 / 400).
    assert resumed.optimizer.param_groups[0]["lr"] == pytest.approx(4.8e-4 * 0.5)
    result = resumed.train()
    assert result.steps == 400 and resumed.learner_steps == 40


SIGINT_SCRIPT = textwrap.dedent(
    """
    import sys
    from batchenv.cli import main
    sys.exit(main(["train", "impala", "--mode", sys.argv[2], "--env", "CartPole-v1",
                   "--num-actors", "2",
                   "--envs-per-actor", "2", "--unroll-length", "10", "--batch-size", "2",
                   "--steps", "100000000", "--log-interval", "0.2", "--no-progress",
                   "--logdir", sys.argv[1]]))
    """
)


def _shared_memory_entries() -> set[str]:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_ctrl_c_stops_everything_within_seconds(mode: str, tmp_path: Path) -> None:
    shm_before = _shared_memory_entries()
    logdir = tmp_path / "run"
    process = subprocess.Popen(
        python_command(SIGINT_SCRIPT, str(logdir), mode),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 90
        metrics = logdir / "metrics.csv"
        while time.monotonic() < deadline and process.poll() is None:
            if metrics.exists() and len(metrics.read_text().splitlines()) >= 3:
                break
            time.sleep(0.1)
        assert process.poll() is None, process.communicate()
        # Children: the fork server and the resource tracker; grandchildren: the actor
        # processes (sync) or the actors' env workers (async, one per actor).
        descendants = psutil.Process(process.pid).children(recursive=True)
        actors = [child for child in descendants if child.ppid() != process.pid]
        assert len(actors) == 2
        sent = time.monotonic()
        process.send_signal(signal.SIGINT)
        _, alive = psutil.wait_procs(actors, timeout=15)
        actors_gone = time.monotonic() - sent
        _, stderr = process.communicate(timeout=15)
        took = time.monotonic() - sent
        _, alive = psutil.wait_procs(descendants, timeout=5)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert not alive, f"left behind: {alive}"
    assert actors_gone < 3.0, f"the actors took {actors_gone:.1f} s to stop"
    assert took < 8.0, f"took {took:.1f} s to exit (checkpoint included)"
    assert process.returncode == 130, stderr
    assert "interrupted; checkpoint saved" in stderr
    assert (logdir / "checkpoint.pt").exists()
    assert _shared_memory_entries() - shm_before == set()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_stop_from_another_thread_ends_training_promptly(mode: str) -> None:
    # Learner threads may be waiting for a batch that no actor will deliver any more.
    config = small_config(mode, total_steps=10**9, batch_size=4)
    trainer = TRAINERS[mode](config, env=functools.partial(CountingEnv, 10), record_unrolls=True)
    outcome: dict = {}

    def run() -> None:
        outcome["result"] = trainer.train()

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 60
    while trainer.step < 200 and time.monotonic() < deadline:
        time.sleep(0.01)
    stopped = time.monotonic()
    trainer.stop()
    thread.join(30)
    assert not thread.is_alive(), "train() did not return after stop()"
    assert time.monotonic() - stopped < 5.0
    result = outcome["result"]
    assert result.steps >= 200 and not result.interrupted
    check_accounting(result, batch_size=4)
