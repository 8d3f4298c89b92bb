"""PettingZoo parallel envs in batchenv: one row per agent, masks for absent agents.

The scripted :class:`~agent_envs.Relay` env (agents leave and join at fixed steps) gives
golden sequences written out by hand; a real PettingZoo env from its own package is
checked against lone copies of itself stepped with the same actions.
"""

from __future__ import annotations

from contextlib import closing

import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

import batchenv
from batchenv import Algorithm, simulate
from batchenv.errors import EnvWorkerError, NotResetError
from batchenv.multi_agent import AgentBatchEnv, is_aec_env, is_parallel_env
from batchenv.vector import BatchVectorEnv
from tests.agent_envs import Mixed, Relay, Tenths, TurnBased, reward

T, F = True, False


def actions_at(t: int, num_envs: int) -> np.ndarray:
    """The actions of step ``t``: ``(t + agent + env) % 3``."""
    return np.array([[(t + k + e) % 3 for k in range(3)] for e in range(num_envs)])


def golden(s: int, e: int) -> list[dict]:
    """Relay's rows, env ``e`` seeded ``s``, stepped with :func:`actions_at`: index 0 is
    the reset, index t the step t."""

    def act(t, k):
        return (t + k + e) % 3

    return [
        dict(obs=[[0, s], [0, 0], [0, 20 + s]], mask=[T, F, T]),
        dict(
            obs=[[1, s], [1, 10 + s], [1, 20 + s]],
            reward=[100 + act(1, 0), 0, 120 + act(1, 2)],
            terminated=[F, F, F],
            truncated=[F, F, F],
            mask=[T, T, T],
        ),
        dict(
            obs=[[2, s], [2, 10 + s], [2, 20 + s]],  # a0's last observation, then masked
            reward=[200 + act(2, 0), 210 + act(2, 1), 220 + act(2, 2)],
            terminated=[T, F, F],
            truncated=[F, F, F],
            mask=[F, T, T],
        ),
        dict(
            obs=[[0, 0], [3, 10 + s], [3, 20 + s]],
            reward=[0, 310 + act(3, 1), 320 + act(3, 2)],
            terminated=[F, F, F],
            truncated=[F, F, F],
            mask=[F, T, T],
        ),
        dict(
            obs=[[0, 0], [4, 10 + s], [4, 20 + s]],
            reward=[0, 410 + act(4, 1), 420 + act(4, 2)],
            terminated=[F, F, F],
            truncated=[F, T, T],
            mask=[F, F, F],
        ),
    ]


def test_parallel_env_detection():
    assert is_parallel_env(Relay())
    assert not is_parallel_env(TurnBased()) and is_aec_env(TurnBased())
    import gymnasium

    assert not is_parallel_env(gymnasium.make("CartPole-v1"))


@pytest.mark.parametrize("num_workers", [1, 2])
def test_agent_batch_env_follows_the_golden_sequence(num_workers):
    with batchenv.make(Relay, 2, num_workers=num_workers) as env:
        assert isinstance(env, AgentBatchEnv)
        assert (len(env), env.num_envs, env.num_agents) == (2, 2, 3)
        assert env.agents == ("a0", "a1", "a2")
        assert env.observation_space.shape == (2,) and env.action_space.n == 3
        expected = [golden(5, 0), golden(6, 1)]
        observ, infos = env.reset(seed=5)
        np.testing.assert_array_equal(observ, [expected[e][0]["obs"] for e in range(2)])
        np.testing.assert_array_equal(
            infos["agent_mask"], [expected[e][0]["mask"] for e in range(2)]
        )
        for t in range(1, 5):
            observ, reward, terminated, truncated, infos = env.step(actions_at(t, 2))
            for key, got in [
                ("obs", observ),
                ("reward", reward),
                ("terminated", terminated),
                ("truncated", truncated),
                ("mask", infos["agent_mask"]),
            ]:
                want = [expected[e][t][key] for e in range(2)]
                np.testing.assert_array_equal(got, want, err_msg=f"{key} at step {t}")
            np.testing.assert_array_equal(env.agent_mask, infos["agent_mask"])
            assert infos["agent_infos"] == ({"a2": {"seen": t}}, {"a2": {"seen": t}})
            over = t == 4
            np.testing.assert_array_equal(infos["episode_truncated"], [over, over])
            np.testing.assert_array_equal(infos["episode_terminated"], [F, F])
        with pytest.raises(NotResetError):
            env.step(actions_at(5, 2))
        observ, infos = env.reset([1])  # reset ahead in the worker, without a seed
        np.testing.assert_array_equal(observ, [[[0, 0], [0, 0], [0, 20]]])
        np.testing.assert_array_equal(infos["agent_mask"], [[T, F, T]])


def test_simulate_scores_each_agent_and_ends_the_episode_when_no_agent_is_left():
    class Fixed(Algorithm):
        def __init__(self):
            self.t = 0

        def perform(self, observ):
            self.t += 1
            return torch.as_tensor(actions_at(self.t, 2))

    with batchenv.make(Relay, 2, num_workers=1) as env:
        algo = Fixed()
        for t in range(1, 5):
            done, score, _ = simulate(env, algo, reset=t == 1)
            assert tuple(score.shape) == (2, 3) and tuple(done.shape) == (2,)
        assert done.tolist() == [T, T]
        want = [
            [sum(golden(0, e)[t]["reward"][k] for t in range(1, 5)) for k in range(3)]
            for e in range(2)
        ]
        np.testing.assert_array_equal(score.numpy(), want)


@pytest.mark.parametrize("share", [None, "auto", 1.0], ids=["workers", "auto", "parent"])
def test_vector_env_has_one_row_per_agent_and_autoresets_whole_envs(share):
    with closing(BatchVectorEnv([Relay] * 2, parent_share=share)) as envs:
        assert envs.num_envs == 6
        assert envs.single_observation_space.shape == (2,)
        observ, infos = envs.reset(seed=5)
        expected = [golden(5, 0), golden(6, 1)]

        def rows(t, key):
            return np.concatenate([expected[e][t][key] for e in range(2)])

        np.testing.assert_array_equal(observ, rows(0, "obs"))
        np.testing.assert_array_equal(infos["agent_mask"], rows(0, "mask"))
        for t in range(1, 5):
            observ, reward, terminated, truncated, infos = envs.step(actions_at(t, 2).ravel())
            np.testing.assert_array_equal(observ, rows(t, "obs"))
            np.testing.assert_array_equal(reward, rows(t, "reward"))
            np.testing.assert_array_equal(terminated, rows(t, "terminated"))
            np.testing.assert_array_equal(truncated, rows(t, "truncated"))
            np.testing.assert_array_equal(infos["agent_mask"], rows(t, "mask"))
            np.testing.assert_array_equal(infos["_seen"], [F, F, T, F, F, T])
            assert infos["seen"][2] == t and infos["seen"][5] == t
        # NEXT_STEP: the envs reset (without a seed), their actions ignored.
        observ, reward, terminated, truncated, infos = envs.step(np.full(6, 2))
        np.testing.assert_array_equal(observ, [[0, 0], [0, 0], [0, 20]] * 2)
        np.testing.assert_array_equal(reward, np.zeros(6))
        np.testing.assert_array_equal(infos["agent_mask"], [T, F, T] * 2)
        assert not terminated.any() and not truncated.any()


def test_vector_env_same_step_autoreset_gives_every_agent_its_final_row():
    envs = BatchVectorEnv([Relay], autoreset_mode=AutoresetMode.SAME_STEP, parent_share=None)
    try:
        envs.reset(seed=5)
        for t in range(1, 4):
            envs.step(actions_at(t, 1).ravel())
        observ, reward, terminated, truncated, infos = envs.step(actions_at(4, 1).ravel())
        last = golden(5, 0)[4]
        np.testing.assert_array_equal(observ, [[0, 0], [0, 0], [0, 20]])  # reset observation
        np.testing.assert_array_equal(reward, last["reward"])
        np.testing.assert_array_equal(truncated, last["truncated"])
        np.testing.assert_array_equal(infos["_final_obs"], [T, T, T])
        np.testing.assert_array_equal(np.stack(infos["final_obs"]), last["obs"])
        np.testing.assert_array_equal(infos["final_info"]["_seen"], [F, F, T])
        assert infos["final_info"]["seen"][2] == 4
        np.testing.assert_array_equal(infos["agent_mask"], [T, F, T])
    finally:
        envs.close()


def test_vector_env_reset_mask_must_select_whole_envs():
    with closing(BatchVectorEnv([Relay] * 2, autoreset_mode="Disabled", parent_share=None)) as envs:
        envs.reset(seed=0)
        with pytest.raises(ValueError, match="some agents of env 1 .* but not all"):
            envs.reset(options={"reset_mask": np.array([F, F, F, T, F, F])})
        observ, _ = envs.reset(seed=7, options={"reset_mask": np.array([F, F, F, T, T, T])})
        np.testing.assert_array_equal(observ[3:], [[0, 8], [0, 0], [0, 28]])  # env 1: seed + 1


@pytest.mark.parametrize("face", ["make", "vector"])
def test_agents_with_different_spaces_are_refused_naming_the_agent(face):
    """A ValueError (as Gymnasium raises for spaces it cannot batch) that is also the
    EnvWorkerError naming the worker and the env."""
    message = (
        r"worker 0 \(tests.agent_envs.Mixed, env 0\) raised ValueError while being built: "
        r"Mixed: agent 'a2' has observation space Box\(0.0, 100.0, \(3,\), float32\), but "
        r"agent 'a0' has Box\(0.0, 100.0, \(2,\), float32\); .* must share one observation"
    )
    with pytest.raises(ValueError, match=message) as info:
        if face == "make":
            batchenv.make(Mixed, 2, num_workers=1)
        else:
            BatchVectorEnv([Mixed] * 2, num_workers=1, parent_share=None)
    assert isinstance(info.value, EnvWorkerError) and info.value.env_index == 0


def test_turn_based_envs_are_refused_with_the_conversion_to_use():
    with pytest.raises(TypeError, match="AEC env .*aec_to_parallel") as info:
        batchenv.make(TurnBased, 1, num_workers=1)
    assert isinstance(info.value, EnvWorkerError)


def test_send_recv_is_refused_for_agent_envs():
    with pytest.raises(ValueError, match="batch_size .* not supported for PettingZoo"):
        batchenv.make(Relay, 2, num_workers=1, batch_size=1)


@pytest.mark.parametrize("share", [None, 1.0], ids=["workers", "parent"])
def test_rewards_are_float64_as_pettingzoo_returns_them(share):
    """Tenths' rewards (0.1, 1.1, ...) are not float32 values: they come back exactly, as
    a single-agent env's float64 rewards do, through make and BatchVectorEnv."""
    want = [[[reward(t, k, (t + k) % 2) for k in range(2)]] * 2 for t in range(1, 4)]
    assert float(np.float32(want[0][0][0])) != want[0][0][0]  # 0.2 would lose digits
    with batchenv.make(Tenths, 2, num_workers=1, parent_share=share) as env:
        env.reset(seed=0)
        for t in range(1, 4):
            actions = np.array([[(t + k) % 2 for k in range(2)]] * 2)
            _, got, *_ = env.step(actions)
            assert got.dtype == np.float64 and got.tolist() == want[t - 1]
    modes = [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP]
    for mode in modes:
        with closing(BatchVectorEnv([Tenths] * 2, parent_share=share, autoreset_mode=mode)) as envs:
            envs.reset(seed=0)
            for t in range(1, 4):  # the last step ends the episodes: SAME_STEP's final rows
                actions = np.array([(t + k) % 2 for k in range(2)] * 2)
                _, got, _, truncated, _ = envs.step(actions)
                assert got.dtype == np.float64 and got.tolist() == sum(want[t - 1], [])
            assert truncated.all()


def test_box_bounds_widen_to_hold_the_zero_observation_of_masked_agents():
    with batchenv.make(lambda: Relay(low=1.0), 1, num_workers=1) as env:
        assert env.observation_space.low.tolist() == [0.0, 0.0]
        observ, _ = env.reset(seed=3)
        assert observ[0, 1].tolist() == [0.0, 0.0]


def test_a_pettingzoo_env_matches_lone_copies_stepped_with_the_same_actions():
    pytest.importorskip("pygame", reason="PettingZoo's butterfly envs need pygame")
    kaz = pytest.importorskip("pettingzoo.butterfly.knights_archers_zombies_v11")

    def make_env():
        return kaz.parallel_env(max_cycles=40, spawn_delay=2, line_death=True)

    lone = [make_env() for _ in range(2)]
    rng = np.random.default_rng(0)
    with batchenv.make(make_env, 2, num_workers=2) as env:
        observ, infos = env.reset(seed=11)
        lone_observ = [copy.reset(seed=11 + e)[0] for e, copy in enumerate(lone)]
        ends = deaths = 0
        for _ in range(90):
            for e, copy in enumerate(lone):
                for k, agent in enumerate(env.agents):
                    live = agent in copy.agents
                    assert infos["agent_mask"][e, k] == live
                    if agent in lone_observ[e]:
                        np.testing.assert_array_equal(observ[e, k], lone_observ[e][agent])
                    else:
                        assert not observ[e, k].any()
            actions = rng.integers(0, 6, size=(2, env.num_agents))
            observ, reward, terminated, truncated, infos = env.step(actions)
            deaths += int(terminated.sum())
            for e, copy in enumerate(lone):
                live = {a: int(actions[e, k]) for k, a in enumerate(env.agents) if a in copy.agents}
                lone_observ[e], rewards, terms, truncs, _ = copy.step(live)
                for k, agent in enumerate(env.agents):
                    assert reward[e, k] == rewards.get(agent, 0.0)
                    assert terminated[e, k] == bool(terms.get(agent, False))
                    assert truncated[e, k] == bool(truncs.get(agent, False))
                lone_observ[e] = {
                    a: o for a, o in lone_observ[e].items() if a in live or a in copy.agents
                }
            over = infos["episode_terminated"] | infos["episode_truncated"]
            if over.any():
                ended = [int(e) for e in np.flatnonzero(over)]
                ends += len(ended)
                for e in ended:
                    assert not lone[e].agents
                    lone_observ[e] = lone[e].reset(seed=100 + e)[0]
                reset_observ, reset_infos = env.reset(ended, seed=[100 + e for e in ended])
                observ = np.array(observ)
                observ[ended] = reset_observ
                infos["agent_mask"][ended] = reset_infos["agent_mask"]
        assert ends >= 2 and deaths >= 1  # episodes ended, and agents died (line_death)


def test_the_pettingzoo_example_trains_and_evaluates():
    pytest.importorskip("pygame", reason="PettingZoo's butterfly envs need pygame")
    pytest.importorskip("pettingzoo.butterfly.knights_archers_zombies_v11")
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "examples" / "pettingzoo_training.py"
    argv = ["--updates", "2", "--rollout", "16", "--num-envs", "2", "--eval-steps", "320"]
    result = subprocess.run(
        [sys.executable, str(script), *argv], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert "AgentBatchEnv(2 envs x 4 agents" in result.stdout
    assert "random play:" in result.stdout and "trained policy:" in result.stdout
    assert "game steps (" in result.stdout
