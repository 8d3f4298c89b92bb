"""AsyncBatchEnv: EnvPool's send/recv API over batchenv workers (``make(batch_size=...)``).

Each env's own sequence of results must be exactly what a lone Gymnasium env gives under
NEXT_STEP autoreset with the same seed and actions, whatever order the envs finish in.
"""

from __future__ import annotations

import functools

import gymnasium
import numpy as np
import pytest

import batchenv
from batchenv import (
    AlreadyPendingCallError,
    BatchEnvError,
    ClosedError,
    EnvWorkerError,
    NoPendingCallError,
    WorkerDiedError,
    WorkerTimeoutError,
)
from batchenv.errors import EnvIdsError
from tests.faulty_envs import PlainEnv, StepExitsEnv, StepHangsEnv, StepRaisesEnv


def policy(env_id: int, t: int) -> int:
    """A fixed CartPole action for env ``env_id`` at its own step ``t``."""
    return (env_id * 7 + t * 3 + t // 5) % 2


def reference(env_id: int, seed: int, steps: int):
    """One env's results under NEXT_STEP autoreset: after a finished episode the next
    action is ignored and the row comes back reset, with reward 0 and both flags off."""
    env = gymnasium.make("CartPole-v1")
    observ, _ = env.reset(seed=seed + env_id)
    results, finished = [(observ, 0.0, False, False)], False
    for t in range(steps):
        if finished:
            observ, _ = env.reset()
            reward, terminated, truncated = 0.0, False, False
        else:
            observ, reward, terminated, truncated, _ = env.step(policy(env_id, t))
        finished = terminated or truncated
        results.append((observ, reward, terminated, truncated))
    env.close()
    return results


@pytest.mark.parametrize("num_workers", [1, 2, 3])
@pytest.mark.parametrize("batch_size", [1, 3, 6])
def test_every_env_follows_its_own_next_step_sequence(batch_size, num_workers):
    num_envs, seed, steps = 6, 11, 60
    env = batchenv.make("CartPole-v1", num_envs, num_workers=num_workers, batch_size=batch_size)
    got = {i: [] for i in range(num_envs)}
    try:
        env.async_reset(seed=seed)
        while min(len(v) for v in got.values()) <= steps:
            observ, reward, terminated, truncated, info = env.recv()
            ids = info["env_id"]
            assert len(ids) == batch_size == len(set(ids.tolist()))
            for k, i in enumerate(ids.tolist()):
                got[i].append((observ[k], reward[k], terminated[k], truncated[k]))
            actions = np.array([policy(i, len(got[i]) - 1) for i in ids.tolist()])
            env.send(actions, ids)
    finally:
        env.close()
    for i in range(num_envs):
        expected = reference(i, seed, steps)
        assert len(got[i]) >= len(expected)
        for t, (want, have) in enumerate(zip(expected, got[i])):
            np.testing.assert_array_equal(have[0], want[0], err_msg=f"env {i} step {t}")
            assert have[1:] == want[1:], f"env {i} step {t}"
        assert any(r[2] for r in expected), "the sequence must cover a finished episode"


def test_full_batch_step_matches_sync_vector_env():
    num_envs, seed = 4, 3
    env = batchenv.make("CartPole-v1", num_envs, batch_size=num_envs)
    sync = gymnasium.vector.SyncVectorEnv([lambda: gymnasium.make("CartPole-v1")] * num_envs)
    try:
        observ, info = env.reset(seed=seed)
        order = np.argsort(info["env_id"])
        want, _ = sync.reset(seed=seed)
        np.testing.assert_array_equal(observ[order], want)
        rng = np.random.default_rng(0)
        for _ in range(80):
            actions = rng.integers(0, 2, num_envs)
            ids = np.sort(info["env_id"])
            observ, reward, terminated, truncated, info = env.step(actions[ids], ids)
            order = np.argsort(info["env_id"])
            want = sync.step(actions)
            np.testing.assert_array_equal(observ[order], want[0])
            np.testing.assert_array_equal(reward[order], want[1])
            np.testing.assert_array_equal(terminated[order], want[2])
            np.testing.assert_array_equal(truncated[order], want[3])
    finally:
        env.close()
        sync.close()


def test_a_slow_env_does_not_stall_the_batch():
    """Env 0 sleeps 2 s in its first step; the other three envs keep coming back."""
    slow = functools.partial(StepHangsEnv, seconds=2.0, at_step=0, only_index=0)
    env = batchenv.make(slow, 4, num_workers=4, batch_size=1, timeout=10.0)
    try:
        env.async_reset(seed=0)
        seen = []
        for _ in range(4):
            seen += env.recv()[4]["env_id"].tolist()
        env.send(np.zeros((4, 1), np.float32), np.arange(4))
        for _ in range(30):  # 30 results before env 0's first step can end
            ids = env.recv()[4]["env_id"]
            seen += ids.tolist()
            env.send(np.zeros((1, 1), np.float32), ids)
        assert 0 not in seen[4:]
    finally:
        env.close()


def test_same_step_mode_returns_the_final_observation_in_the_info():
    short = functools.partial(PlainEnv, episode_length=2)
    env = batchenv.make(short, 2, num_workers=1, batch_size=2, autoreset_mode="same_step")
    try:
        env.async_reset(seed=0)
        env.recv()
        for _ in range(2):
            observ, reward, terminated, truncated, info = env.step(
                np.full((2, 1), 0.5, np.float32), np.arange(2)
            )
        assert terminated.tolist() == [True, True]
        assert observ[:, 1].tolist() == [0.0, 0.0]  # the new episode's first observation
        assert [o[1] for o in info["final_obs"]] == [2.0, 2.0]
        assert info["_final_obs"].tolist() == [True, True]
        assert sorted(info["env_id"].tolist()) == [0, 1]
    finally:
        env.close()


def test_infos_are_batched_with_masks_and_env_ids():
    env = batchenv.make(PlainEnv, 3, num_workers=1, batch_size=3)
    try:
        env.async_reset(seed=5)
        _, _, _, _, info = env.recv()
        order = np.argsort(info["env_id"])
        assert info["index"][order].tolist() == [5, 6, 7]
        assert info["_index"].all()
    finally:
        env.close()


@pytest.fixture
def cartpole():
    env = batchenv.make("CartPole-v1", 4, num_workers=2, batch_size=2)
    yield env
    env.close()


def test_misuse_is_a_typed_error_that_says_what_to_do(cartpole):
    with pytest.raises(NoPendingCallError, match="with no env in flight; call async_reset"):
        cartpole.recv()
    with pytest.raises(NoPendingCallError, match="before async_reset"):
        cartpole.send(np.zeros(2, np.int64), [0, 1])
    cartpole.async_reset(seed=0)
    with pytest.raises(AlreadyPendingCallError, match=r"async_reset\(\) called while envs"):
        cartpole.async_reset()
    with pytest.raises(EnvIdsError, match=r"without env_ids needs a recv\(\) first") as info:
        cartpole.send(np.zeros(2, np.int64))  # no recv() yet: no ids to reuse
    assert isinstance(info.value, ValueError)
    ids = cartpole.recv()[4]["env_id"]
    with pytest.raises(AlreadyPendingCallError, match="still in flight"):
        cartpole.send(np.zeros(1, np.int64), [int(np.setdiff1d(np.arange(4), ids)[0])])
    for env_ids, error_type, match in [
        ([int(ids[0])] * 2, ValueError, r"env_ids must be unique, got \[\d, \d\]"),
        ([], ValueError, "send\\(\\) needs at least one env id, got none"),
        ([4], IndexError, r"env_ids \[4\] out of range for 4 envs"),
        ([0.5], TypeError, "env_ids must be integers, got an array of float64"),
    ]:
        with pytest.raises(EnvIdsError, match=match) as info:
            cartpole.send(np.zeros(len(env_ids), np.int64), env_ids)
        assert isinstance(info.value, BatchEnvError) and isinstance(info.value, error_type)
    with pytest.raises(ValueError, match="batch"):
        cartpole.send(np.zeros(3, np.int64), ids)  # 3 actions for 2 ids
    cartpole.send(np.zeros(2, np.int64))  # the ids of the last recv()
    assert len(cartpole.recv()[0]) == 2


def test_bad_construction_arguments_fail_before_any_worker_starts():
    with pytest.raises(ValueError, match=r"batch_size must be an integer in \[1, num_envs=4\]"):
        batchenv.make("CartPole-v1", 4, batch_size=5)
    with pytest.raises(ValueError, match="autoreset_mode must be one of"):
        batchenv.make("CartPole-v1", 4, batch_size=2, autoreset_mode="disabled")
    with pytest.raises(ValueError, match="parent_share applies to lockstep"):
        batchenv.make("CartPole-v1", 4, batch_size=2, parent_share=0.5)


def test_an_env_that_raises_names_the_env_and_breaks_the_batch():
    bad = functools.partial(StepRaisesEnv, at_step=3, only_index=2)
    env = batchenv.make(bad, 4, num_workers=2, batch_size=4)
    try:
        env.async_reset(seed=0)
        env.recv()
        with pytest.raises(EnvWorkerError, match=r"env 2\)? raised FaultyEnvError") as caught:
            for _ in range(5):
                env.step(np.zeros((4, 1), np.float32), np.arange(4))
        assert caught.value.env_index == 2 and caught.value.worker == 1
        assert caught.value.step == 3 and "at step 3" in str(caught.value)  # its own count
        with pytest.raises(ClosedError, match="broke"):
            env.recv()
    finally:
        env.close()


def test_a_dead_worker_is_named_at_once():
    """Every env exits in its second step; whichever worker's pair gets there first (a
    fast worker may be served several times in a row: recv takes the first to finish)."""
    dies = functools.partial(StepExitsEnv, code=5, at_step=1, only_index=None)
    env = batchenv.make(dies, 4, num_workers=2, batch_size=2, timeout=30.0)
    try:
        env.async_reset(seed=0)
        with pytest.raises(WorkerDiedError, match=r"envs \[(0, 1|2, 3)\]\) died") as caught:
            for _ in range(10):
                ids = env.recv()[4]["env_id"]
                env.send(np.zeros((2, 1), np.float32), ids)
        assert caught.value.worker in (0, 1) and caught.value.exitcode == 5
    finally:
        env.close()


def test_a_hung_env_times_out_naming_the_rows_in_flight():
    hangs = functools.partial(StepHangsEnv, at_step=0, only_index=3)
    env = batchenv.make(hangs, 4, num_workers=2, batch_size=4, timeout=0.5)
    try:
        env.async_reset(seed=0)
        env.recv()
        env.send(np.zeros((4, 1), np.float32), np.arange(4))
        with pytest.raises(WorkerTimeoutError, match="did not answer") as caught:
            env.recv()
        assert 3 in caught.value.env_indices
    finally:
        env.close()


@pytest.mark.parametrize(("cores", "threads", "expected"), [(4, 1, 3), (2, 2, 1), (4, 3, 1)])
def test_default_workers_leave_torchs_threads_their_cores(monkeypatch, cores, threads, expected):
    """With send/recv the training process computes while the workers step: by default
    the workers take only the cores torch's intra-op threads leave free."""
    import sys

    make_module = sys.modules["batchenv.make"]  # batchenv.make is also the function

    monkeypatch.setattr(make_module, "default_num_workers", lambda: cores)
    monkeypatch.setattr(make_module, "torch_threads", lambda: threads)
    assert make_module.async_num_workers(16) == expected
    assert make_module.async_num_workers(1) == 1
    env = batchenv.make("CartPole-v1", 4, batch_size=2)
    try:
        assert len(env.processes()) == min(expected, 4)
    finally:
        env.close()
