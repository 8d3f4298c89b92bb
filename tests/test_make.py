"""batchenv.make: shared-memory workers, reset ahead, pinning, lean workers."""

import functools
import os

import gymnasium as gym
import numpy as np
import pytest
import torch  # noqa: F401  (the parent has torch; the workers must not import it)

import batchenv
from batchenv.errors import AlreadyPendingCallError, NotResetError
from tests import faulty_envs as fe
from tests.lean_envs import ModulesProbe, ScalarInfoEnv


@pytest.mark.parametrize("start_method", ["forkserver", "spawn"])
def test_workers_do_not_import_torch(start_method):
    env = batchenv.make(ModulesProbe, 4, num_workers=2, start_method=start_method)
    try:
        assert env.get_attr("has_torch") == (False,) * 4
        pids = set(env.get_attr("pid"))
        assert len(pids) == 2 and os.getpid() not in pids
    finally:
        env.close()


def _reference(num_envs, seed):
    envs = [gym.make("CartPole-v1") for _ in range(num_envs)]
    observ = np.stack([e.reset(seed=seed + i)[0] for i, e in enumerate(envs)])
    return envs, observ


@pytest.mark.parametrize("spin_us", [0.0, 300.0], ids=["sleep", "spin=300us"])
@pytest.mark.parametrize("reset_ahead", [True, False], ids=["reset_ahead", "plain_reset"])
@pytest.mark.parametrize("num_envs,num_workers", [(1, 1), (7, 2), (16, 3)])
def test_equals_gymnasium_envs(num_envs, num_workers, reset_ahead, spin_us):
    env = batchenv.make(
        "CartPole-v1", num_envs, num_workers, reset_ahead=reset_ahead, spin_us=spin_us
    )
    reference, expected = _reference(num_envs, seed=11)
    try:
        observ, infos = env.reset(seed=11)
        np.testing.assert_array_equal(observ, expected)
        assert len(infos) == num_envs
        rng = np.random.default_rng(0)
        finished = 0
        for _ in range(300):
            actions = rng.integers(0, 2, num_envs)
            observ, reward, terminated, truncated, infos = env.step(actions)
            results = [e.step(int(a)) for e, a in zip(reference, actions)]
            np.testing.assert_array_equal(observ, np.stack([r[0] for r in results]))
            np.testing.assert_array_equal(reward, [r[1] for r in results])
            np.testing.assert_array_equal(terminated, [r[2] for r in results])
            np.testing.assert_array_equal(truncated, [r[3] for r in results])
            rows = np.flatnonzero(terminated | truncated)
            if len(rows):
                finished += len(rows)
                observ, _ = env.reset(indices=rows)
                np.testing.assert_array_equal(
                    observ, np.stack([reference[i].reset()[0] for i in rows])
                )
        assert finished > 0
    finally:
        env.close()


def test_reset_ahead_requires_reset_of_finished_rows():
    env = batchenv.make("CartPole-v1", 2, 1)
    try:
        env.reset(seed=0)
        while True:
            _, _, terminated, truncated, _ = env.step(np.zeros(2, np.int64))
            if (terminated | truncated).any():
                break
        with pytest.raises(NotResetError, match="need a reset"):
            env.step(np.zeros(2, np.int64))
        env.reset(indices=np.flatnonzero(terminated | truncated))
        env.step(np.zeros(2, np.int64))  # usable again
    finally:
        env.close()


def test_reset_of_rows_reset_ahead_returns_their_infos_and_checks_its_arguments():
    # Rows reset ahead by their worker are reset without a round trip; the infos of that
    # early reset, the index checks and the pending-call check must survive the shortcut.
    env = batchenv.make(functools.partial(fe.PlainEnv, episode_length=2), 4, 2)
    try:
        env.reset(seed=0)
        env.step(np.zeros((4, 1), np.float32))
        _, _, terminated, _, infos = env.step(np.zeros((4, 1), np.float32))
        assert terminated.all()
        assert [info["t"] for info in infos] == [2] * 4  # the last step's own infos
        with pytest.raises(ValueError, match="unique"):
            env.reset(indices=[1, 1])
        with pytest.raises(IndexError, match="out of range"):
            env.reset(indices=[1, 4])
        observ, infos = env.reset(indices=[3, 1])
        assert [info["index"] for info in infos] == [3, 1]
        assert [info["t"] for info in infos] == [0, 0]
        np.testing.assert_array_equal(observ, [[3, 0, 0], [1, 0, 0]])
        with pytest.raises(NotResetError, match=r"\[0, 2\]"):
            env.step(np.zeros((4, 1), np.float32))
        env.reset_async(indices=[0])  # row 0 was reset ahead, but the call must wait
        with pytest.raises(AlreadyPendingCallError):
            env.reset(indices=[2])
        observ, infos = env.reset_wait()
        assert infos[0]["index"] == 0
        np.testing.assert_array_equal(observ, [[0, 0, 0]])
        env.reset(indices=[2])
        observ, *_ = env.step(np.zeros((4, 1), np.float32))
        np.testing.assert_array_equal(observ[:, 1], [1, 1, 1, 1])
    finally:
        env.close()


def test_infos_keep_the_types_and_values_of_numpy_scalars():
    # Workers pickle NumPy scalars by value (their own reduction is slow); what arrives
    # must be the same type and value, signed zero and NaN included.
    env = batchenv.make(ScalarInfoEnv, 3, 2)
    reference = ScalarInfoEnv()
    try:
        env.reset(seed=0)
        reference.reset(seed=0)
        for _ in range(2):
            infos = env.step(np.zeros(3, np.int64))[4]
            expected = reference.step(0)[4]
            for info in infos:
                assert info.keys() == expected.keys()
                for key, value in expected.items():
                    assert type(info[key]) is type(value), key
                    np.testing.assert_array_equal(info[key], value)
                assert np.signbit(info["neg_zero"])
    finally:
        env.close()


def test_seeded_reset_of_a_row_reset_ahead_reseeds():
    env = batchenv.make("CartPole-v1", 1, 1)
    try:
        first, _ = env.reset(seed=3)
        while not any(env.step(np.zeros(1, np.int64))[2:4]):
            pass
        again, _ = env.reset(indices=[0], seed=3)
        np.testing.assert_array_equal(first, again)
    finally:
        env.close()


def test_pin_workers_sets_affinity():
    cores = sorted(os.sched_getaffinity(0))
    env = batchenv.make("CartPole-v1", 4, num_workers=2, pin_workers=True)
    try:
        affinities = [os.sched_getaffinity(p.pid) for p in env.processes()]
        assert affinities == [{cores[0]}, {cores[1 % len(cores)]}]
    finally:
        env.close()
    env = batchenv.make("CartPole-v1", 4, num_workers=2, pin_workers=False)
    try:
        assert all(os.sched_getaffinity(p.pid) == set(cores) for p in env.processes())
    finally:
        env.close()


def test_constructor_and_id_both_work_and_arguments_are_checked():
    env = batchenv.make(lambda: gym.make("Pendulum-v1", g=9.81), 3, 2)
    try:
        observ, _ = env.reset(seed=0)
        assert observ.shape == (3, 3) and observ.dtype == np.float32
        assert env.get_attr("spec")[0].id == "Pendulum-v1"
    finally:
        env.close()
    with pytest.raises(ValueError, match="num_envs must be a positive integer"):
        batchenv.make("CartPole-v1", 0)
    with pytest.raises(ValueError, match="num_workers must be a positive integer"):
        batchenv.make("CartPole-v1", 2, num_workers=0)
    with pytest.raises(TypeError, match="only apply to a Gymnasium id"):
        batchenv.make(lambda: gym.make("CartPole-v1"), 2, max_episode_steps=5)
    with pytest.raises(ValueError, match="start_method must be one of"):
        batchenv.make("CartPole-v1", 2, start_method="fork")


@pytest.mark.parametrize("spin_us", [-1.0, float("nan")], ids=["negative", "nan"])
def test_spin_must_be_a_non_negative_number(spin_us):
    with pytest.raises(ValueError, match="spin_us must be >= 0"):
        batchenv.make("CartPole-v1", 2, 1, spin_us=spin_us)


def test_default_workers_are_the_cores_and_64_envs_stay_small():
    """make("CartPole-v1", 64) uses one worker per core, and its workers (which never import
    torch) take far less than the 1 GB the issue allows for all of them."""
    import psutil

    env = batchenv.make("CartPole-v1", 64)
    try:
        env.reset(seed=0)
        workers = env.processes()
        assert len(workers) == min(64, len(os.sched_getaffinity(0)))
        rss = sum(psutil.Process(worker.pid).memory_info().rss for worker in workers)
        assert rss < 500 * 2**20, f"workers use {rss / 2**20:.0f} MB"
    finally:
        env.close()
