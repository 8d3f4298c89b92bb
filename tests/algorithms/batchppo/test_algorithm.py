"""BatchPPO end to end: actions, modes, updates, recurrence, checkpoints, learning."""

from __future__ import annotations

import io
from functools import partial

import gymnasium as gym
import numpy as np
import pytest
import torch

from batchenv.algorithms.batchppo import BatchPPO, BatchPPOConfig
from tests.algorithms.batchppo.drive import CountdownEnv, GymRows, Loop

SMALL = BatchPPOConfig(
    policy_layers=(16, 16),
    value_layers=(16, 16),
    update_every=4,
    update_epochs=3,
    max_length=20,
    learning_rate=1e-3,
)


def _make(env_id: str, max_length: int):
    return partial(gym.make, env_id, max_episode_steps=max_length)


def _build(env_id="CartPole-v1", rows=4, config=SMALL, seed=0):
    envs = GymRows(_make(env_id, config.max_length), rows, seed=seed)
    algo = BatchPPO(envs.observation_space, envs.action_space, config)
    return envs, algo, Loop(envs, algo)


def _countdown(length, rows, config, truncate=False, discrete=True):
    envs = GymRows(partial(CountdownEnv, length, truncate, discrete), rows)
    algo = BatchPPO(envs.observation_space, envs.action_space, config)
    return algo, Loop(envs, algo)


@pytest.mark.parametrize(
    "space, shape, dtype",
    [
        (gym.spaces.Box(-1.0, 1.0, (2, 2), np.float32), (5, 2, 2), torch.float32),
        (gym.spaces.Discrete(3, start=-1), (5,), torch.int64),
    ],
    ids=["box2x2", "discrete-start-1"],
)
def test_action_shapes_and_dtypes(space, shape, dtype):
    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    algo = BatchPPO(observation_space, space, SMALL)
    action = algo.perform(torch.randn(5, 3))
    assert action.shape == shape and action.dtype == dtype
    if isinstance(space, gym.spaces.Discrete):
        assert set(action.tolist()) <= {-1, 0, 1}
        algo.experience(
            torch.randn(5, 3),
            action,
            torch.ones(5),
            torch.zeros(5, dtype=torch.bool),
            torch.randn(5, 3),
            torch.zeros(5, dtype=torch.bool),
        )
        assert algo.memory.running["action"][:, 0].tolist() == (action + 1).tolist()


def test_unsupported_spaces_and_misuse_raise():
    box = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    with pytest.raises(TypeError, match="float Box .* or a Discrete"):
        BatchPPO(box, gym.spaces.MultiDiscrete([2, 2]), SMALL)
    with pytest.raises(TypeError, match="Box observation space"):
        BatchPPO(gym.spaces.Discrete(4), box, SMALL)
    algo = BatchPPO(box, box, SMALL)
    algo.perform(torch.zeros(4, 3))
    with pytest.raises(ValueError, match="got 5 rows, but this BatchPPO serves 4"):
        algo.perform(torch.zeros(5, 3))
    step = (
        torch.zeros(4, 3),
        torch.zeros(4, 3),
        torch.zeros(4),
        torch.zeros(4, dtype=torch.bool),
        torch.zeros(4, 3),
        torch.zeros(4, dtype=torch.bool),
    )
    algo.experience(*step)
    with pytest.raises(RuntimeError, match="without a perform"):
        algo.experience(*step)


def test_eval_mode_acts_with_the_mean_and_learns_nothing():
    envs, algo, loop = _build("Pendulum-v1")
    loop.run(30)
    count, episodes = algo.observ_norm.count.clone(), algo.memory.episodes
    algo.eval_mode()
    observ = torch.randn(4, 3)
    first, second = algo.perform(observ), algo.perform(observ)
    assert torch.equal(first, second)
    params, _ = algo.policy.step(algo.observ_norm.transform(observ), None)
    torch.testing.assert_close(first, algo.policy.head.mode(params))
    loop.run(30)
    assert torch.equal(algo.observ_norm.count, count) and algo.memory.episodes == episodes
    algo.train_mode()
    assert not torch.equal(algo.perform(observ), algo.perform(observ))


def test_update_uses_every_episode_when_many_finish_at_once():
    config = SMALL.replace(update_every=2)
    algo, loop = _countdown(3, 6, config)
    for _ in range(3):
        loop.step()
    assert len(loop.summaries) == 1
    summaries = loop.summaries[0]
    assert summaries["episodes"].item() == 6  # not 2: none dropped
    for name in ("policy_loss", "value_loss", "kl", "beta", "entropy"):
        assert summaries[name].dim() == 0 and torch.isfinite(summaries[name])


def test_every_finished_episode_reaches_an_update():
    config = SMALL.replace(update_every=3)
    envs, algo, loop = _build("CartPole-v1", rows=5, config=config)
    loop.run(300)
    used = sum(int(s["episodes"]) for s in loop.summaries)
    assert used + algo.memory.episodes == len(loop.finished)
    assert all(int(s["episodes"]) >= 3 for s in loop.summaries)


@pytest.mark.parametrize("gae_lambda", [None, 0.9], ids=["monte-carlo", "gae"])
def test_truncated_episodes_bootstrap_from_the_next_value(gae_lambda):
    config = SMALL.replace(update_every=100, gae_lambda=gae_lambda, discount=0.9)
    targets = {}
    for truncate in (False, True):
        algo, loop = _countdown(4, 2, config, truncate=truncate, discrete=False)
        loop.run(4)
        episodes = algo.memory.take()
        assert episodes.truncated.tolist() == [truncate] * 2
        assert episodes.last_observ.tolist() == [[0.0], [0.0]]
        targets[truncate] = algo.targets(episodes)[0][0, :4]
        last = algo.observ_norm.transform(episodes.last_observ[:1])
        bootstrap = algo.value(last).squeeze().detach()
    # Same data and networks (same seed): only the bootstrap term differs, discounted back.
    difference = targets[True] - targets[False]
    expected = bootstrap * 0.9 ** torch.arange(4, 0, -1, dtype=torch.float32)
    if gae_lambda is not None:
        expected = bootstrap * (0.9 * 0.9) ** torch.arange(3, -1, -1) * 0.9
    torch.testing.assert_close(difference, expected)


def test_recurrent_replay_reproduces_the_acting_distribution():
    config = SMALL.replace(recurrent=True, update_every=1000, max_length=200)
    envs, algo, loop = _build("CartPole-v1", rows=3, config=config)
    algo.observ_norm.update = lambda value: None  # freeze the statistics for the comparison
    loop.run(40)
    loop.step(reset=True)  # a forced reset cuts running episodes short: state zeroed
    loop.run(40)
    episodes = algo.memory.take()
    assert len(episodes) >= 3 and len(set(episodes.length.tolist())) > 1
    with torch.no_grad():
        replay = algo.policy.sequence(algo.observ_norm.transform(episodes.observ))
    mask = episodes.mask
    torch.testing.assert_close(replay[mask], episodes.params[mask], rtol=1e-5, atol=1e-5)


class _Recorder:
    """Forwards the four callbacks to ``algo`` and records them with cloned arguments."""

    def __init__(self, algo):
        self.algo, self.calls = algo, []

    def __getattr__(self, name):
        method = getattr(self.algo, name)

        def record(*args):
            result = method(*args)
            self.calls.append((name, [a.clone() for a in args], result))
            return result

        return record


def _tensors(algo):
    state = algo.state_dict()
    yield from algo.policy.state_dict().items()
    yield from algo.value.state_dict().items()
    yield from algo.observ_norm.state_dict().items()
    yield from algo.reward_norm.state_dict().items()
    yield "beta", algo.beta
    yield "generator", state["generator"]
    for index, slot in state["optimizer"]["state"].items():
        for key, value in slot.items():
            yield f"adam.{index}.{key}", value


@pytest.mark.parametrize(
    "env_id, overrides",
    [
        ("CartPole-v1", {}),
        ("Pendulum-v1", {"minibatches": 2}),
        ("Pendulum-v1", {"recurrent": True, "gae_lambda": 0.95}),
    ],
    ids=["categorical", "gaussian-minibatches", "recurrent-gae"],
)
def test_checkpoint_round_trip_continues_bit_identically(env_id, overrides):
    config = SMALL.replace(**overrides)
    envs, algo, loop = _build(env_id, rows=4, config=config)
    loop.run(50)
    assert algo.updates >= 2
    buffer = io.BytesIO()
    torch.save(algo.state_dict(), buffer)
    recorder = _Recorder(algo)
    loop.algo = recorder
    loop.run(60)
    assert any(name == "experience" and result for name, _, result in recorder.calls)

    fresh = BatchPPO(envs.observation_space, envs.action_space, config.replace(seed=123))
    buffer.seek(0)
    fresh.load_state_dict(torch.load(buffer))
    for name, args, result in recorder.calls:
        replayed = getattr(fresh, name)(*args)
        if name == "perform":
            assert torch.equal(replayed, result)
    for (key, mine), (_, theirs) in zip(_tensors(algo), _tensors(fresh), strict=True):
        assert torch.equal(mine, theirs), key
    assert fresh.updates == algo.updates


def test_learns_cartpole():
    config = BatchPPOConfig(
        env="CartPole-v1",
        max_length=200,
        num_agents=8,
        update_every=8,
        update_epochs=10,
        learning_rate=3e-3,
        policy_layers=(32, 32),
        value_layers=(32, 32),
        seed=0,
    )
    envs, algo, loop = _build("CartPole-v1", rows=8, config=config)
    loop.run(1500)
    first, last = np.mean(loop.finished[:20]), np.mean(loop.finished[-30:])
    # A random policy balances about 22 steps; 200 is the limit here.
    assert first < 40 and last > 100, (first, last)
