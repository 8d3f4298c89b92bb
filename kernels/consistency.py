"""Hold two implementations of an environment to each other, step by step.

WarpDrive's consistency checker (docs/tag.md): step N copies of a reference env and the
GPU env on the same random actions from the same states, compare observations and rewards
per element (pass if the absolute difference is below 0.01 *or* the relative one below 1%),
the done flags exactly, reset finished envs on both sides to the same state, and go on.

Either side is an in-graph env factory (``make_env(num_envs, seed=seed)`` -> an env with
``get_state``/``set_state``, such as ``CartPole`` or ``functools.partial(CartPole,
backend="triton")``) or a Gymnasium id, stepped as ``num_envs`` separate Gymnasium envs whose
``env.unwrapped.state`` (and TimeLimit step count) are set directly.

Side *a* leads: at the start, and for every env that finishes, its state is copied to side
*b* (for a finished env, after side *a* reset it). With ``teacher_forcing=True`` it is
copied before every step, so each transition is compared on its own (no chaotic growth of
rounding differences, useful for float32 against float64).

    >>> import functools
    >>> from batchenv.kernels import CartPole
    >>> report = check_consistency(CartPole, "CartPole-v1", num_envs=4, steps=50, seed=0)
    >>> report.passed
    True
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch

#: WarpDrive's tolerance: a value passes if ``|a - b| < ATOL`` or
#: ``|a - b| < RTOL * max(|a|, |b|)``.
WARPDRIVE_ATOL = 0.01
WARPDRIVE_RTOL = 0.01

EnvSource = str | Callable[..., Any]


@dataclass(frozen=True)
class Mismatch:
    """The first disagreement: where it is, and both sides' values."""

    step: int  #: step index (0 = the first step after the common start)
    env: int  #: batch row
    agent: int | None  #: agent index, None for single-agent envs
    field: str  #: "observ", "reward", "terminated" or "truncated"
    feature: int | None  #: index into the (per-agent, flattened) observation; None otherwise
    value_a: float | bool
    value_b: float | bool

    def __str__(self) -> str:
        where = f"step {self.step}, env {self.env}"
        if self.agent is not None:
            where += f", agent {self.agent}"
        what = self.field if self.feature is None else f"{self.field}[{self.feature}]"
        return f"{what} differs at {where}: a={self.value_a!r}, b={self.value_b!r}"


@dataclass(frozen=True)
class ConsistencyReport:
    """What :func:`check_consistency` found."""

    name_a: str
    name_b: str
    num_envs: int
    steps: int  #: steps asked for
    steps_compared: int  #: steps whose results were compared (up to and including a mismatch)
    values_compared: int  #: observation, reward and flag elements compared
    episodes: int  #: episodes that finished (and were reset on both sides) on the way
    atol: float
    rtol: float
    mismatch: Mismatch | None  #: the first disagreement, None when everything agreed

    @property
    def passed(self) -> bool:
        return self.mismatch is None

    def __str__(self) -> str:
        head = f"{self.name_a} vs {self.name_b}, {self.num_envs} envs"
        if self.mismatch is None:
            return (
                f"{head}: consistent over {self.steps_compared} steps ({self.values_compared} "
                f"values, {self.episodes} finished episodes; atol={self.atol}, "
                f"rtol={self.rtol})"
            )
        return f"{head}: {self.mismatch} (atol={self.atol}, rtol={self.rtol})"


def check_consistency(
    make_env_a: EnvSource,
    make_env_b: EnvSource,
    num_envs: int,
    steps: int,
    seed: int,
    atol: float | None = None,
    rtol: float | None = None,
    *,
    teacher_forcing: bool = False,
) -> ConsistencyReport:
    """Step both implementations on the same random actions and report the first mismatch.

    Args:
        make_env_a: the leading side: a Gymnasium id, or a factory called as
            ``make_env_a(num_envs, seed=seed)`` returning an in-graph env with
            ``get_state``/``set_state``.
        make_env_b: the other side, the same kinds.
        num_envs: batch rows (Gymnasium envs on a Gymnasium side).
        steps: steps to compare.
        seed: seeds the envs and the actions.
        atol, rtol: per-element tolerances for observations and rewards; each left as None
            takes WarpDrive's value (0.01 and 1%). Done flags must agree exactly.
        teacher_forcing: copy side a's state to side b before every step.

    Returns:
        A :class:`ConsistencyReport`; ``report.passed`` is False when a mismatch was found
        (comparison stops there), ``report.mismatch`` says where.

        >>> from batchenv.kernels import Pendulum
        >>> check_consistency(Pendulum, "Pendulum-v1", 2, 10, seed=1).values_compared
        120
    """
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"check_consistency(num_envs={num_envs!r}): must be an int >= 1")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"check_consistency(steps={steps!r}): must be an int >= 0")
    atol = WARPDRIVE_ATOL if atol is None else float(atol)
    rtol = WARPDRIVE_RTOL if rtol is None else float(rtol)
    a = _make_side(make_env_a, num_envs, seed)
    try:
        b = _make_side(make_env_b, num_envs, seed)
    except BaseException:
        a.close()
        raise
    try:
        _check_compatible(a, b)
        everyone = np.arange(num_envs)
        b.set_states(everyone, *a.get_states(everyone))
        actions = _ActionSampler(a.action_space, num_envs, a.num_agents, seed)
        values = episodes = 0
        mismatch = None
        step = -1
        for step in range(steps):
            if teacher_forcing and step > 0:
                b.set_states(everyone, *a.get_states(everyone))
            action = actions.sample()
            result_a, result_b = a.step(action), b.step(action)
            mismatch, count = _compare(
                step, result_a, result_b, atol, rtol, multi_agent=a.num_agents is not None
            )
            values += count
            if mismatch is not None:
                break
            done = np.flatnonzero(result_a[2] | result_a[3])
            if done.size:
                episodes += done.size
                a.reset(done)
                b.reset(done)  # a Gymnasium env must be reset to leave its finished episode
                b.set_states(done, *a.get_states(done))
        return ConsistencyReport(
            name_a=a.name,
            name_b=b.name,
            num_envs=num_envs,
            steps=steps,
            steps_compared=step + 1,
            values_compared=values,
            episodes=episodes,
            atol=atol,
            rtol=rtol,
            mismatch=mismatch,
        )
    finally:
        a.close()
        b.close()


# -- comparison ---------------------------------------------------------------------------

Result = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _compare(
    step: int, a: Result, b: Result, atol: float, rtol: float, multi_agent: bool
) -> tuple[Mismatch | None, int]:
    """The first mismatch of one step (lowest env; then observ, reward, terminated,
    truncated; then agent and feature) and the number of values compared."""
    (obs_a, rew_a, term_a, trunc_a), (obs_b, rew_b, term_b, trunc_b) = a, b
    for name, x, y in (("observ", obs_a, obs_b), ("reward", rew_a, rew_b)):
        if x.shape != y.shape:
            raise ValueError(
                f"check_consistency: {name} shapes differ at step {step}: {x.shape} vs {y.shape}"
            )
    fields = {  # name: (a's values, b's values, where they disagree)
        "observ": (obs_a, obs_b, ~_close(obs_a, obs_b, atol, rtol)),  # [N, agents, features]
        "reward": (rew_a, rew_b, ~_close(rew_a, rew_b, atol, rtol)),  # [N, agents]
        "terminated": (term_a, term_b, term_a != term_b),  # [N]
        "truncated": (trunc_a, trunc_b, trunc_a != trunc_b),  # [N]
    }
    count = obs_a.size + rew_a.size + term_a.size + trunc_a.size
    num_envs = len(term_a)
    bad_rows = np.zeros(num_envs, dtype=bool)
    for _, _, bad in fields.values():
        bad_rows |= bad.reshape(num_envs, -1).any(axis=1)
    if not bad_rows.any():
        return None, count
    env = int(np.argmax(bad_rows))
    for field, (x, y, bad) in fields.items():
        if not bad[env].any():
            continue
        if bad.ndim == 1:  # a done flag
            return Mismatch(step, env, None, field, None, bool(x[env]), bool(y[env])), count
        index = tuple(np.argwhere(bad[env])[0])  # (agent, feature) or (agent,)
        agent = int(index[0]) if multi_agent else None
        feature = int(index[1]) if field == "observ" else None
        value_a, value_b = float(x[env][index]), float(y[env][index])
        return Mismatch(step, env, agent, field, feature, value_a, value_b), count
    raise AssertionError("unreachable")  # pragma: no cover


def _close(x: np.ndarray, y: np.ndarray, atol: float, rtol: float) -> np.ndarray:
    """WarpDrive's rule, elementwise; NaN never passes, equal infinities do."""
    with np.errstate(invalid="ignore"):
        diff = np.abs(x - y)
        scale = np.maximum(np.abs(x), np.abs(y))
        return (diff < atol) | (diff < rtol * scale) | (x == y)


# -- the two kinds of side ------------------------------------------------------------------


class _InGraphSide:
    """An in-graph env (batched tensors, ``get_state``/``set_state``)."""

    def __init__(self, make_env: Callable[..., Any], num_envs: int, seed: int) -> None:
        self.env = make_env(num_envs, seed=seed)
        self.name = repr(self.env)
        for method in ("get_state", "set_state", "step", "reset"):
            if not callable(getattr(self.env, method, None)):
                raise ValueError(
                    f"check_consistency: {self.name} has no {method}(); an in-graph side needs "
                    "get_state/set_state to be put in the other side's state"
                )
        if self.env.num_envs != num_envs:
            raise ValueError(
                f"check_consistency: {self.name} has {self.env.num_envs} envs, asked for {num_envs}"
            )
        self.num_envs = num_envs
        self.num_agents = getattr(self.env, "num_agents", None)
        self.action_space = self.env.single_action_space
        self.observation_space = self.env.single_observation_space
        self.device = torch.device(getattr(self.env, "device", "cpu"))

    def get_states(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        saved = self.env.get_state()
        index = torch.as_tensor(rows, dtype=torch.int64)
        state = saved["state"].cpu()[index].to(torch.float64).numpy()
        elapsed = saved["elapsed"].cpu()[index].numpy()
        return state.reshape(len(rows), -1), elapsed

    def set_states(self, rows: np.ndarray, state: np.ndarray, elapsed: np.ndarray) -> None:
        shape = self.env.get_state()["state"].shape[1:]
        self.env.set_state(
            {
                "state": torch.as_tensor(state).reshape(len(rows), *shape),
                "elapsed": torch.as_tensor(elapsed, dtype=torch.int32),
            },
            indices=torch.as_tensor(rows, dtype=torch.int64, device=self.device),
        )

    def step(self, action: np.ndarray) -> Result:
        dtype = torch.int64 if np.issubdtype(action.dtype, np.integer) else torch.float32
        observ, reward, terminated, truncated = self.env.step(
            torch.as_tensor(action, dtype=dtype, device=self.device)
        )
        n, agents = self.num_envs, self.num_agents or 1
        return (
            observ.detach().cpu().to(torch.float64).numpy().reshape(n, agents, -1),
            reward.detach().cpu().to(torch.float64).numpy().reshape(n, agents),
            terminated.cpu().numpy().astype(bool).reshape(n),
            truncated.cpu().numpy().astype(bool).reshape(n),
        )

    def reset(self, rows: np.ndarray) -> None:
        self.env.reset(torch.as_tensor(rows, dtype=torch.int64, device=self.device))

    def close(self) -> None:
        close = getattr(self.env, "close", None)
        if callable(close):
            close()


class _GymSide:
    """``num_envs`` Gymnasium envs of one id, stepped in a loop; state via ``unwrapped.state``."""

    def __init__(self, env_id: str, num_envs: int, seed: int) -> None:
        self.name = env_id
        self.envs = [gym.make(env_id) for _ in range(num_envs)]
        for i, env in enumerate(self.envs):
            env.reset(seed=seed + i)
            if not hasattr(env.unwrapped, "state"):
                self.close()
                raise ValueError(
                    f"check_consistency: Gymnasium env {env_id} keeps no `unwrapped.state`, so "
                    "it cannot be put in the other side's state"
                )
        self.num_envs = num_envs
        self.num_agents = None
        self.action_space = self.envs[0].action_space
        self.observation_space = self.envs[0].observation_space

    def get_states(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        state = np.stack(
            [np.asarray(self.envs[i].unwrapped.state, dtype=np.float64).ravel() for i in rows]
        )
        limits = [_time_limit(self.envs[i]) for i in rows]
        elapsed = np.array([0 if limit is None else limit._elapsed_steps for limit in limits])
        return state, elapsed

    def set_states(self, rows: np.ndarray, state: np.ndarray, elapsed: np.ndarray) -> None:
        for row, values, steps in zip(rows, state, elapsed):
            env = self.envs[row]
            env.unwrapped.state = np.array(values, dtype=np.float64)
            limit = _time_limit(env)
            if limit is not None:
                limit._elapsed_steps = int(steps)  # Gymnasium keeps no public setter

    def step(self, action: np.ndarray) -> Result:
        discrete = isinstance(self.action_space, gym.spaces.Discrete)
        results = [env.step(int(a) if discrete else a) for env, a in zip(self.envs, action)]
        n = self.num_envs
        return (
            np.stack([np.asarray(r[0], dtype=np.float64).ravel() for r in results]).reshape(
                n, 1, -1
            ),
            np.array([float(r[1]) for r in results]).reshape(n, 1),
            np.array([bool(r[2]) for r in results]),
            np.array([bool(r[3]) for r in results]),
        )

    def reset(self, rows: np.ndarray) -> None:
        for row in rows:
            self.envs[row].reset()

    def close(self) -> None:
        for env in self.envs:
            env.close()


def _time_limit(env: gym.Env) -> Any:
    """The env's TimeLimit wrapper (or None); it counts the steps that truncate episodes."""
    while isinstance(env, gym.Wrapper):
        if isinstance(env, gym.wrappers.TimeLimit):
            return env
        env = env.env
    return None


def _make_side(source: EnvSource, num_envs: int, seed: int) -> _InGraphSide | _GymSide:
    if isinstance(source, str):
        return _GymSide(source, num_envs, seed)
    if callable(source):
        return _InGraphSide(source, num_envs, seed)
    raise ValueError(
        f"check_consistency: an env must be a Gymnasium id or a factory "
        f"make_env(num_envs, seed=...), got {type(source).__name__}"
    )


def _check_compatible(a: _InGraphSide | _GymSide, b: _InGraphSide | _GymSide) -> None:
    if a.action_space != b.action_space:
        raise ValueError(
            f"check_consistency: action spaces differ: {a.name} {a.action_space} vs "
            f"{b.name} {b.action_space}"
        )
    if a.observation_space.shape != b.observation_space.shape:
        raise ValueError(
            f"check_consistency: observation shapes differ: {a.name} "
            f"{a.observation_space.shape} vs {b.name} {b.observation_space.shape}"
        )
    if a.num_agents != b.num_agents:
        raise ValueError(
            f"check_consistency: agent counts differ: {a.name} {a.num_agents} vs "
            f"{b.name} {b.num_agents}"
        )


class _ActionSampler:
    """Seeded random actions for every row (and agent), in the action space's bounds."""

    def __init__(self, space: gym.Space, num_envs: int, num_agents: int | None, seed: int):
        self.space = space
        self.shape = (num_envs,) if num_agents is None else (num_envs, num_agents)
        self.rng = np.random.default_rng(seed)
        space.seed(seed)

    def sample(self) -> np.ndarray:
        space, rng, shape = self.space, self.rng, self.shape
        if isinstance(space, gym.spaces.Discrete):
            return rng.integers(space.start, space.start + space.n, size=shape)
        if isinstance(space, gym.spaces.MultiDiscrete):
            return space.start + rng.integers(0, space.nvec, size=(*shape, *space.nvec.shape))
        if isinstance(space, gym.spaces.Box) and space.is_bounded():
            low, high = space.low.astype(np.float64), space.high.astype(np.float64)
            return rng.uniform(low, high, size=(*shape, *space.shape)).astype(space.dtype)
        count = int(np.prod(shape))
        return np.stack([space.sample() for _ in range(count)]).reshape(*shape, *space.shape)
