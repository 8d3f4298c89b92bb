"""The batched classic-control envs against Gymnasium's own, row by row.

Two ways of driving both sides with the same random actions (episodes that end are reset on
both sides to the same fresh states):

- *teacher forced* (float32): before every step Gymnasium's env is put in the torch env's
  state, so each transition is compared at float32 tolerance without chaotic error growth;
- *free running* (float64): both sides run open loop; the float64 state matches Gymnasium to
  rounding (MountainCarContinuous only to float32, since Gymnasium stores its state in float32).
"""

from __future__ import annotations

import doctest
import importlib

import gymnasium as gym
import numpy as np
import pytest
import torch

from batchenv.in_graph.env import InGraphEnv
from batchenv.kernels import Acrobot, CartPole, MountainCarContinuous, Pendulum

ENVS = [
    pytest.param(CartPole, id="CartPole-v1"),
    pytest.param(Pendulum, id="Pendulum-v1"),
    pytest.param(MountainCarContinuous, id="MountainCarContinuous-v0"),
    pytest.param(Acrobot, id="Acrobot-v1"),
]
MODULES = ["cartpole", "pendulum", "mountain_car", "acrobot"]
# Free-running float64 state tolerance (absolute) per env.
FLOAT64_STATE_ATOL = {
    "CartPole-v1": 1e-10,
    "Pendulum-v1": 1e-10,
    "MountainCarContinuous-v0": 2e-5,  # Gymnasium's own state is float32
    "Acrobot-v1": 1e-8,
}


def _actions(env, rng: np.random.Generator) -> tuple[torch.Tensor, list]:
    """Random actions as (torch batch, per-row Gymnasium actions); Box actions overshoot the
    bounds by 30% so that the clipping paths run too."""
    space, n = env.single_action_space, env.num_envs
    if isinstance(space, gym.spaces.Discrete):
        a = rng.integers(0, space.n, size=n)
        return torch.as_tensor(a, dtype=torch.int64), [int(x) for x in a]
    a = rng.uniform(1.3 * space.low, 1.3 * space.high, size=(n, *space.shape)).astype(np.float32)
    return torch.as_tensor(a), list(a)


def _gym_state(genv) -> np.ndarray:
    return np.asarray(genv.unwrapped.state, dtype=np.float64)


def _put_gym_state(genv, row: torch.Tensor) -> None:
    genv.unwrapped.state = row.to(torch.float64).numpy().copy()


def _drive(cls, dtype, teacher_forced: bool, *, steps=520, n=3, seed=0):
    env = cls(n, seed=seed, dtype=dtype)
    gyms = [gym.make(cls.gym_id) for _ in range(n)]
    rng = np.random.default_rng(seed)
    state = env.get_state()["state"]
    for i, genv in enumerate(gyms):
        genv.reset(seed=i)
        _put_gym_state(genv, state[i])
    atol = 1e-5 if dtype == torch.float32 else FLOAT64_STATE_ATOL[cls.gym_id]
    episodes = 0
    for t in range(steps):
        if teacher_forced:
            state = env.get_state()["state"]
            for i, genv in enumerate(gyms):
                _put_gym_state(genv, state[i])
        action, gym_actions = _actions(env, rng)
        observ, reward, terminated, truncated = env.step(action)
        state = env.get_state()["state"]
        for i, genv in enumerate(gyms):
            g_obs, g_rew, g_term, g_trunc, _ = genv.step(gym_actions[i])
            where = f"{cls.gym_id} {dtype} step {t} row {i}"
            np.testing.assert_allclose(
                observ[i].numpy(), g_obs, rtol=1e-5, atol=atol, err_msg=where
            )
            np.testing.assert_allclose(float(reward[i]), g_rew, rtol=1e-6, atol=1e-5, err_msg=where)
            np.testing.assert_allclose(state[i].numpy(), _gym_state(genv), atol=atol, err_msg=where)
            assert (bool(terminated[i]), bool(truncated[i])) == (g_term, g_trunc), where
        done = terminated | truncated
        if done.any():
            rows = done.nonzero()[:, 0]
            episodes += len(rows)
            env.reset(rows)
            state = env.get_state()["state"]
            for i in rows.tolist():
                gyms[i].reset()
                _put_gym_state(gyms[i], state[i])
    return episodes


@pytest.mark.parametrize("cls", ENVS)
def test_matches_gymnasium_float32_teacher_forced(cls):
    _drive(cls, torch.float32, teacher_forced=True)


@pytest.mark.parametrize("cls", ENVS)
def test_matches_gymnasium_float64_free_running(cls):
    _drive(cls, torch.float64, teacher_forced=False)


# Edge states Gymnasium-side random actions rarely reach: near the termination bounds, the
# clips, the walls. Each runs a few steps without reset (CartPole keeps going after it
# terminated, where its reward drops to 0).
EDGE_CASES = [
    pytest.param(
        CartPole, [[2.39, 1.0, 0.0, 0.0], [0.0, 0.0, -0.2, -2.0]], [1, 0, 1], id="CartPole-v1"
    ),
    pytest.param(
        Pendulum, [[np.pi - 1e-3, 7.9], [-20.0, -8.0]], [[2.5], [-3.0], [0.5]], id="Pendulum-v1"
    ),
    pytest.param(
        MountainCarContinuous,
        [[0.449, 0.06], [-1.195, -0.07], [-1.2, 0.0]],
        [[1.0], [-2.0], [0.3]],
        id="MountainCarContinuous-v0",
    ),
    pytest.param(
        Acrobot,
        [[3.1, 0.1, 12.0, 28.0], [-3.1, -3.1, -12.5, -28.2], [2.0, 0.5, 0.0, 0.0]],
        [2, 0, 1],
        id="Acrobot-v1",
    ),
]


@pytest.mark.filterwarnings("ignore")  # Gymnasium warns when stepped after termination
@pytest.mark.parametrize(("cls", "states", "actions"), EDGE_CASES)
def test_edge_states_match_gymnasium(cls, states, actions):
    states = torch.tensor(states, dtype=torch.float64)
    env = cls(len(states), seed=0, dtype=torch.float64)
    env.set_state({"state": states})
    gyms = [gym.make(cls.gym_id) for _ in states]
    for i, genv in enumerate(gyms):
        genv.reset(seed=i)
        _put_gym_state(genv, states[i])
    for t, a in enumerate(actions):
        action = torch.tensor([a] * len(states))
        if action.is_floating_point():
            action = action.to(torch.float32)
        observ, reward, terminated, truncated = env.step(action)
        state = env.get_state()["state"]
        for i, genv in enumerate(gyms):
            g_action = np.asarray(a, dtype=np.float32) if action.is_floating_point() else a
            g_obs, g_rew, g_term, g_trunc, _ = genv.step(g_action)
            where = f"{cls.gym_id} step {t} row {i}"
            np.testing.assert_allclose(observ[i].numpy(), g_obs, atol=1e-6, err_msg=where)
            np.testing.assert_allclose(float(reward[i]), g_rew, atol=1e-5, err_msg=where)
            tol = FLOAT64_STATE_ATOL[cls.gym_id]
            np.testing.assert_allclose(state[i].numpy(), _gym_state(genv), atol=tol, err_msg=where)
            assert (bool(terminated[i]), bool(truncated[i])) == (g_term, g_trunc), where


def test_cartpole_reward_is_zero_after_termination():
    env = CartPole(2, seed=0)
    env.set_state({"state": torch.tensor([[2.45, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])})
    _, reward, terminated, _ = env.step(torch.ones(2, dtype=torch.int64))
    assert terminated.tolist() == [True, False]
    assert reward.tolist() == [0.0, 1.0]  # row 0 had already terminated before this step


@pytest.mark.parametrize("cls", ENVS)
def test_spaces_and_time_limit_match_gymnasium(cls):
    env = cls(2, seed=0)
    genv = gym.make(cls.gym_id)
    assert isinstance(env, InGraphEnv)
    assert env.single_observation_space == genv.observation_space
    assert env.single_observation_space.dtype == np.float32
    assert env.single_action_space == genv.action_space
    assert env.max_episode_steps == genv.spec.max_episode_steps
    assert env.device == torch.device("cpu")


@pytest.mark.parametrize("cls", ENVS)
def test_truncated_at_time_limit(cls):
    env = cls(2, seed=0)
    limit = env.max_episode_steps
    env.set_state({"elapsed": torch.tensor([limit - 2, 0])})
    action, _ = _actions(env, np.random.default_rng(0))
    flags = [env.step(action)[3].tolist() for _ in range(3)]
    assert flags == [[False, False], [True, False], [True, False]]
    env.reset(torch.tensor([0]))
    assert env.get_state()["elapsed"].tolist() == [0, 3]


@pytest.mark.parametrize("cls", ENVS)
def test_same_seed_same_trajectories(cls):
    def rollout(seed):
        env = cls(5, seed=seed)
        rng = np.random.default_rng(1)
        out = [env.reset(torch.arange(5))]
        for _ in range(20):
            out.append(env.step(_actions(env, rng)[0])[0])
            out.append(env.reset(torch.tensor([1, 3])))
        return torch.cat(out)

    assert torch.equal(rollout(3), rollout(3))
    assert not torch.equal(rollout(3), rollout(4))


@pytest.mark.parametrize("cls", ENVS)
def test_initial_states_follow_gymnasium_distribution(cls):
    env = cls(2000, seed=0)
    env.reset(torch.arange(2000))
    state = env.get_state()["state"]
    low = torch.tensor(cls.init_low)
    high = torch.tensor(cls.init_high)
    assert bool(((state >= low) & (state <= high)).all())
    spread = state.max(0).values - state.min(0).values
    assert torch.allclose(spread, high - low, atol=0.01 * float((high - low).max()))
    # float32 and float64 envs with the same seed start from the same states
    env64 = cls(4, seed=5, dtype=torch.float64)
    assert torch.equal(env64.get_state()["state"].float(), cls(4, seed=5).get_state()["state"])


@pytest.mark.parametrize("cls", ENVS)
def test_reset_touches_only_given_rows(cls):
    env = cls(6, seed=0)
    before = env.get_state()
    env.set_state({"elapsed": torch.full((6,), 9)})
    observ = env.reset(torch.tensor([4, 1]))
    after = env.get_state()
    assert observ.shape == (2, *env.single_observation_space.shape)
    assert observ.dtype == torch.float32
    keep = [0, 2, 3, 5]
    assert torch.equal(after["state"][keep], before["state"][keep])
    assert not torch.equal(after["state"][[4, 1]], before["state"][[4, 1]])
    assert after["elapsed"].tolist() == [9, 0, 9, 9, 0, 9]
    assert env.reset(torch.tensor([], dtype=torch.int64)).shape[0] == 0


@pytest.mark.parametrize("cls", ENVS)
def test_get_set_state_round_trip(cls):
    env = cls(4, seed=0)
    rng = np.random.default_rng(0)
    for _ in range(3):
        env.step(_actions(env, rng)[0])
    saved = env.get_state()
    env.get_state()["state"].fill_(7.0)  # get_state hands out clones
    assert torch.equal(env.get_state()["state"], saved["state"])
    actions = [_actions(env, rng)[0] for _ in range(5)]
    first = [env.step(a) for a in actions]
    env.set_state(saved)
    second = [env.step(a) for a in actions]
    for a, b in zip(first, second):
        for x, y in zip(a, b):
            assert torch.equal(x, y)
    # partial rows
    other = cls(4, seed=1).get_state()
    env.set_state({"state": other["state"][[0, 2]]}, indices=torch.tensor([1, 3]))
    now = env.get_state()["state"]
    assert torch.equal(now[[1, 3]], other["state"][[0, 2]])


@pytest.mark.parametrize("cls", ENVS)
def test_returned_observations_are_not_aliased(cls):
    env = cls(3, seed=0)
    action, _ = _actions(env, np.random.default_rng(0))
    observ = env.step(action)[0]
    kept, state = observ.clone(), env.get_state()["state"]
    env.reset(torch.arange(3))  # does not write into the observ handed out before
    env.set_state({"state": state})
    assert torch.equal(observ, kept)
    observ.add_(100.0)  # writing into an observ does not touch the env
    assert torch.equal(env.get_state()["state"], state)


@pytest.mark.parametrize("n", [1, 7], ids=lambda n: f"n={n}")
@pytest.mark.parametrize("cls", ENVS)
def test_odd_batch_sizes(cls, n):
    env = cls(n, seed=0)
    observ = env.reset(torch.arange(n))
    assert observ.shape == (n, *env.single_observation_space.shape)
    rng = np.random.default_rng(0)
    for _ in range(3):
        observ, reward, terminated, truncated = env.step(_actions(env, rng)[0])
    assert observ.shape == (n, *env.single_observation_space.shape)
    assert observ.dtype == reward.dtype == torch.float32
    assert reward.shape == terminated.shape == truncated.shape == (n,)
    assert terminated.dtype == truncated.dtype == torch.bool


@pytest.mark.parametrize("cls", ENVS)
def test_argument_validation(cls):
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="num_envs"):
            cls(bad)
    with pytest.raises(ValueError, match="backend"):
        cls(2, backend="jax")
    with pytest.raises(NotImplementedError, match="GPU-native kernels"):
        cls(2, backend="triton")
    with pytest.raises(ValueError, match="dtype"):
        cls(2, dtype=torch.float16)
    with pytest.raises(ValueError, match="seed"):
        cls(2, seed="7")
    env = cls(3, seed=0)
    discrete = isinstance(env.single_action_space, gym.spaces.Discrete)
    expected = r"\(3,\)" if discrete else r"\(3, 1\)"
    bad_actions = (
        [torch.zeros(4, dtype=torch.int64), torch.zeros(3, 1, dtype=torch.int64), torch.zeros(3)]
        if discrete
        else [torch.zeros(3), torch.zeros(2, 1), torch.zeros(3, 1, dtype=torch.int64)]
    )
    for action in bad_actions:
        with pytest.raises(ValueError, match=expected):
            env.step(action)
    with pytest.raises(ValueError, match="int64"):
        env.reset(torch.tensor([0], dtype=torch.int32))
    with pytest.raises(ValueError, match="shape"):
        env.set_state({"state": torch.zeros(2, env.state_dim)})
    with pytest.raises(ValueError, match="unknown keys"):
        env.set_state({"velocity": torch.zeros(3)})


def test_torch_compile_step_has_no_graph_breaks():
    """fullgraph=True fails on any graph break; error_on_recompile catches a step that
    recompiles after the state tensors are replaced (by step, reset or set_state)."""
    eager, compiled = CartPole(7, seed=0), CartPole(7, seed=0)
    step = torch.compile(compiled.step, fullgraph=True)
    rng = np.random.default_rng(0)
    with torch._dynamo.config.patch(error_on_recompile=True):
        for t in range(5):
            action = _actions(eager, rng)[0]
            for x, y in zip(eager.step(action), step(action)):
                torch.testing.assert_close(x, y)
            if t == 2:
                rows = torch.tensor([1, 5])
                torch.testing.assert_close(eager.reset(rows), compiled.reset(rows))
    assert torch.equal(eager.get_state()["elapsed"], compiled.get_state()["elapsed"])


@pytest.mark.parametrize("cls", ENVS)
def test_state_is_updated_in_place(cls):
    """step, reset, set_state and seed write into the env's tensors (a compiled step then
    allocates no state and replays no attribute writes); values match a fresh copy's."""
    env, twin = cls(5, seed=3), cls(5, seed=3)
    state, elapsed = env.state, env.elapsed
    rng = np.random.default_rng(0)
    action = _actions(env, rng)[0]
    env.step(action, reset_mask=torch.tensor([True, False, False, True, False]))
    env.reset(torch.tensor([2]))
    env.set_state({"elapsed": torch.tensor([9])}, torch.tensor([4]))
    restarts = env._restarts
    env.seed(11)
    assert env.state is state and env.elapsed is elapsed and env._restarts is restarts
    assert env.elapsed.tolist() == [0, 1, 0, 0, 9]
    twin.step(action, reset_mask=torch.tensor([True, False, False, True, False]))
    twin.reset(torch.tensor([2]))
    assert torch.equal(env.state, twin.state)


@pytest.mark.parametrize("cls", ENVS)
def test_env_built_or_reset_in_inference_mode_steps_outside_it(cls):
    """In-place updates must not trip over inference tensors (evaluation under
    torch.inference_mode(), then training outside it)."""
    with torch.inference_mode():
        env = cls(3, seed=0)
        env.reset(torch.tensor([0, 2]))
        env.step(_actions(env, np.random.default_rng(0))[0])
    observ, reward, terminated, truncated = env.step(_actions(env, np.random.default_rng(1))[0])
    assert not observ.is_inference() and not env.state.is_inference()
    env.reset(torch.tensor([1]))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(f"batchenv.kernels.{name}")
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("name", ["CartPole", "Acrobot", "Pendulum"])
def test_seeds_per_block_are_lone_envs(name):
    """seed=[s0, s1]: block k (rows k*n .. k*n+n-1) draws and steps as a lone env seeded s_k."""
    import batchenv.kernels as kernels

    cls = getattr(kernels, name)
    joint = cls(num_envs=6, seed=[7, 9])
    lone = [cls(num_envs=3, seed=7), cls(num_envs=3, seed=9)]
    starts = torch.cat([env.get_state()["state"] for env in lone])
    assert torch.equal(joint.get_state()["state"], starts)
    generator = torch.Generator().manual_seed(0)
    space = joint.single_action_space
    for _ in range(40):
        if hasattr(space, "n"):
            action = torch.randint(0, int(space.n), (6,), generator=generator)
        else:
            action = torch.rand((6, *space.shape), generator=generator) * 2 - 1
        observ, reward, terminated, truncated = joint.step(action)
        parts = [env.step(a) for env, a in zip(lone, action.split(3))]
        assert torch.equal(observ, torch.cat([p[0] for p in parts]))
        assert torch.equal(reward, torch.cat([p[1] for p in parts]))
        done = terminated | truncated | (torch.arange(6) == _ % 6)
        joint.reset_where(done)
        for env, part in zip(lone, done.split(3)):
            env.reset_where(part)
    with pytest.raises(ValueError, match="num_envs divisible"):
        cls(num_envs=5, seed=[1, 2])
    with pytest.raises(ValueError, match="by their number and backend='torch'"):
        cls(num_envs=4, seed=[1, 2], backend="triton")  # Philox keys one seed per kernel
