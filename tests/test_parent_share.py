"""parent_share: the parent steps a share of the envs while its workers step the rest.

The results must not depend on who steps which env; the split follows the measured rule of
``batchenv.workers.parent_share``; an env stepped in the parent fails like a worker's env.
"""

from __future__ import annotations

import functools

import gymnasium
import numpy as np
import pytest

import batchenv
from batchenv import EnvWorkerError
from batchenv.vector import BatchVectorEnv
from batchenv.workers import parent_share
from tests.faulty_envs import PlainEnv, StepRaisesEnv

SHARES = [None, 0.25, 0.5, 1.0, "auto"]


def rollout(env, steps: int = 120, seed: int = 7):
    """Observations, rewards and flags of a fixed-action lockstep loop (reset finished)."""
    observ, _ = env.reset(seed=seed)
    trace = [observ.copy()]
    for t in range(steps):
        actions = (np.arange(env.num_envs) + t // 3) % 2
        observ, reward, terminated, truncated, _ = env.step(actions)
        trace += [observ.copy(), reward.copy(), terminated | truncated]
        done = np.flatnonzero(terminated | truncated)
        if len(done):
            trace.append(env.reset(indices=done)[0].copy())
    return trace


@pytest.mark.parametrize("share", SHARES)
def test_batch_env_results_do_not_depend_on_the_share(share):
    env = batchenv.make("CartPole-v1", 6, parent_share=share)
    baseline = batchenv.make("CartPole-v1", 6)
    try:
        for have, want in zip(rollout(env), rollout(baseline), strict=True):
            np.testing.assert_array_equal(have, want)
    finally:
        env.close()
        baseline.close()


@pytest.mark.parametrize("share", SHARES)
@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
def test_vector_env_matches_sync_vector_env(share, mode):
    fns = [lambda: gymnasium.make("CartPole-v1")] * 5
    env = BatchVectorEnv(fns, parent_share=share, autoreset_mode=mode)
    sync = gymnasium.vector.SyncVectorEnv(fns, autoreset_mode=gymnasium.vector.AutoresetMode(mode))
    try:
        np.testing.assert_array_equal(env.reset(seed=3)[0], sync.reset(seed=3)[0])
        for t in range(150):
            actions = (np.arange(5) + t // 4) % 2
            have, want = env.step(actions), sync.step(actions)
            for a, b in zip(have[:4], want[:4]):
                np.testing.assert_array_equal(a, b)
            assert sorted(have[4]) == sorted(want[4])
    finally:
        env.close()
        sync.close()


def test_an_env_in_the_parent_that_raises_is_named_with_its_step():
    bad = functools.partial(StepRaisesEnv, at_step=2, only_index=0)
    env = batchenv.make(bad, 4, parent_share=0.5)
    env.reset(seed=0)
    action = np.zeros((4, 1), np.float32)
    env.step(action)
    env.step(action)
    message = r"env 0 .*parent_share\) raised FaultyEnvError at step 2"
    with pytest.raises(EnvWorkerError, match=message) as caught:
        env.step(action)
    assert caught.value.env_index == 0 and caught.value.step == 2
    assert type(caught.value.__cause__).__name__ == "FaultyEnvError"
    with pytest.raises(batchenv.ClosedError, match="broke at step 2"):
        env.step(action)
    env.close()


def test_attributes_and_calls_reach_envs_on_both_sides():
    env = batchenv.make(PlainEnv, 4, parent_share=0.5)
    try:
        env.reset(seed=10)
        assert env.get_attr("index") == (10, 11, 12, 13)
        assert env.call("add", 1, b=2) == (13, 14, 15, 16)
        env.set_attr("episode_length", [1, 2, 3, 4])
        assert env.get_attr("episode_length") == (1, 2, 3, 4)
        assert len(env.processes()) == 1
    finally:
        env.close()


def test_close_closes_the_parents_envs():
    env = batchenv.make(PlainEnv, 4, parent_share=0.5)
    local = env._transport.local
    env.close()
    assert all(e.closed for e in local.envs)


@pytest.mark.parametrize(
    ("step_seconds", "num_envs", "expected"),
    [
        (10e-6, 8, parent_share.Plan(8, 0, 10e-6)),  # 80 us of work <= one round trip
        (1e-6, 64, parent_share.Plan(64, 0, 1e-6)),
        # 768 us of work, one worker: p = (1 + 150/768) / 2 = 0.598 -> 38.25 -> 38 envs
        (12e-6, 64, parent_share.Plan(38, 1, 12e-6)),
        # 960 us: p = (1 + 150/960) / 2 = 0.578 -> 9.25 -> 9 of 16
        (60e-6, 16, parent_share.Plan(9, 1, 60e-6)),
    ],
)
def test_auto_split_follows_the_measured_rule(monkeypatch, step_seconds, num_envs, expected):
    monkeypatch.setattr(parent_share, "torch_threads", lambda: 1)
    monkeypatch.setattr(parent_share, "probe_step_seconds", lambda constructor: step_seconds)
    assert parent_share.plan("auto", PlainEnv, num_envs, None, cores=2) == expected


def test_auto_with_three_workers_balances_both_sides(monkeypatch):
    monkeypatch.setattr(parent_share, "torch_threads", lambda: 1)
    monkeypatch.setattr(parent_share, "probe_step_seconds", lambda constructor: 100e-6)
    split = parent_share.plan("auto", PlainEnv, 40, None, cores=4)
    # p * 4 ms = (1 - p) * 4 ms / 3 + 150 us -> p = 0.278 -> 11 envs, 3 workers
    assert split == parent_share.Plan(11, 3, 100e-6)


@pytest.mark.parametrize(("threads", "cores", "expected"), [(2, 2, (16, 0)), (2, 4, (7, 2))])
def test_torch_threads_spinning_on_the_cores_leave_fewer_workers(
    monkeypatch, threads, cores, expected
):
    """torch's OpenMP threads spin on the cores after each op: each one is a core less."""
    monkeypatch.setattr(parent_share, "torch_threads", lambda: threads)
    monkeypatch.setattr(parent_share, "probe_step_seconds", lambda constructor: 50e-6)
    split = parent_share.plan("auto", PlainEnv, 16, None, cores=cores)
    # 4 cores, 2 threads: 2 workers; p = (1/2 + 150/800) / (3/2) = 0.458 -> 7.33 -> 7
    assert (split.local, split.num_workers) == expected


def test_an_env_the_probe_cannot_build_or_step_goes_to_the_workers(monkeypatch):
    monkeypatch.setattr(parent_share, "torch_threads", lambda: 1)
    for constructor in (
        functools.partial(StepRaisesEnv, at_step=0, only_index=None),
        functools.partial(StepRaisesEnv, at_step=0, only_index=None, obs_dim="bad"),
    ):
        assert parent_share.probe_step_seconds(constructor) is None
        assert parent_share.plan("auto", constructor, 8, None, cores=2) == parent_share.Plan(0, 2)


def test_torch_threads_reads_this_process():
    import torch

    assert parent_share.torch_threads() == torch.get_num_threads()


def test_probe_times_a_real_env():
    seconds = parent_share.probe_step_seconds(lambda: gymnasium.make("CartPole-v1"))
    assert 0.0 < seconds < 0.01


@pytest.mark.parametrize("bad", ["half", 1.5, -0.1, True])
def test_a_bad_share_is_refused_with_what_is_allowed(bad):
    with pytest.raises(ValueError, match="parent_share must be 'auto', a fraction in"):
        batchenv.make("CartPole-v1", 4, parent_share=bad)
