"""PettingZoo parallel envs in batchenv: every agent of every env is a row.

``batchenv.make(parallel_env_fn, num_envs)`` and ``BatchVectorEnv([parallel_env_fn] * n)``
accept a constructor of a PettingZoo ``ParallelEnv`` whose agents share one observation
and one action space (SuperSuit's and PufferLib's convention: pad heterogeneous agents to
one space first). Each env runs in a worker as a :class:`JointEnv`, a Gymnasium env whose
observation carries every agent's results, so one env's agents travel through shared
memory together. The parent then sees ``num_envs x num_agents`` rows:

- ``make`` returns an :class:`AgentBatchEnv`: arrays ``[num_envs, num_agents, ...]`` with
  the agent axis after the env axis, like the Tag kernels, so ``simulate()`` treats it the
  same way (``score`` is ``[B, agents]``, ``done`` is ``[B]``: the episode is over when no
  agent is left);
- ``BatchVectorEnv`` flattens the two axes into ``num_envs x num_agents`` vector rows, env
  by env (SuperSuit's ``pettingzoo_env_to_vec_env_v1`` + ``concat_vec_envs_v1`` layout).

The rules for a row, whichever face:

- an agent that acts at a step has its observation, reward (float64) and
  termination/truncation flags as PettingZoo returns them; at the step it leaves, its
  row carries the flag and its last observation;
- an agent that is not in ``env.agents`` (it left, or has not joined yet) is *masked*:
  ``infos["agent_mask"]`` is False for its row, its observation is zeros, its reward 0,
  its flags False, and its action is never passed to the env (it must still lie in the
  action space when actions are checked);
- the env's episode ends when no agent is left (or every one left at once); the env then
  resets as a whole, as the autoreset mode or ``reset(indices)`` says. Agents of one env
  reset together and share its seed (env ``i`` gets ``seed + i``).

    >>> from pettingzoo.sisl import pursuit_v5
    >>> env = batchenv.make(pursuit_v5.parallel_env, num_envs=4)
    >>> observ, infos = env.reset(seed=0)          # observ: [4, 8, 7, 7, 3]
    >>> observ, reward, terminated, truncated, infos = env.step(actions)  # actions: [4, 8]
    >>> infos["agent_mask"].shape
    (4, 8)

Worker processes import this module: it needs only NumPy and Gymnasium.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate

__all__ = [
    "AgentBatchEnv",
    "AgentRows",
    "AgentSpaces",
    "JointEnv",
    "is_aec_env",
    "is_parallel_env",
]

#: The keys of a JointEnv's observation besides the agents' own observations.
_RESULT_KEYS = ("reward", "terminated", "truncated", "mask")


def is_parallel_env(env: Any) -> bool:
    """True for a PettingZoo ``ParallelEnv`` (by its API: ``possible_agents``,
    ``observation_space(agent)``, ``step`` of a dict of actions), never for a Gymnasium env."""
    if isinstance(env, gymnasium.Env) or is_aec_env(env):
        return False
    return (
        hasattr(env, "possible_agents")
        and callable(getattr(env, "observation_space", None))
        and callable(getattr(env, "action_space", None))
        and callable(getattr(env, "step", None))
    )


def is_aec_env(env: Any) -> bool:
    """True for a PettingZoo ``AECEnv`` (agents act in turn: ``agent_iter``)."""
    return hasattr(env, "possible_agents") and callable(getattr(env, "agent_iter", None))


class AgentSpaces(spaces.Dict):
    """The observation space of a :class:`JointEnv`: the agents' observations batched
    along an agent axis (``"observation"``) and per agent ``"reward"``, ``"terminated"``,
    ``"truncated"`` and ``"mask"``. Its attributes tell the parent how to lay out rows."""

    def __init__(
        self, agents: tuple[str, ...], observation_space: spaces.Space, action_space: spaces.Space
    ):
        count = len(agents)
        super().__init__(
            {
                "observation": batch_space(observation_space, count),
                "reward": spaces.Box(-np.inf, np.inf, (count,), np.float64),
                "terminated": spaces.MultiBinary(count),
                "truncated": spaces.MultiBinary(count),
                "mask": spaces.MultiBinary(count),
            },
            sort_keys=False,
        )
        self.agents = tuple(agents)
        self.agent_observation_space = observation_space
        self.agent_action_space = action_space

    def __eq__(self, other: Any) -> bool:
        return (
            isinstance(other, AgentSpaces)
            and self.agents == other.agents
            and self.agent_observation_space == other.agent_observation_space
            and self.agent_action_space == other.agent_action_space
        )

    __hash__ = None  # as gymnasium's Dict

    def __repr__(self) -> str:
        return (
            f"AgentSpaces({len(self.agents)} agents, observation "
            f"{self.agent_observation_space}, action {self.agent_action_space})"
        )


def agent_spaces(env: Any) -> tuple[tuple[str, ...], spaces.Space, spaces.Space]:
    """``(agents, observation_space, action_space)`` of a parallel env whose agents share
    one of each; ValueError naming the first agent that differs otherwise."""
    agents = tuple(env.possible_agents)
    if not agents:
        raise ValueError(f"{type(env).__name__} has no possible_agents: nothing to batch")
    first = agents[0]
    observation, action = env.observation_space(first), env.action_space(first)
    for agent in agents[1:]:
        for kind, space, expected in (
            ("observation", env.observation_space(agent), observation),
            ("action", env.action_space(agent), action),
        ):
            if space != expected:
                raise ValueError(
                    f"{type(env).__name__}: agent {agent!r} has {kind} space {space}, but "
                    f"agent {first!r} has {expected}; batchenv makes one row per agent, so "
                    "agents must share one observation and one action space: pad them "
                    "(SuperSuit's pad_observations_v0 / pad_action_space_v0) or batch each "
                    "kind of agent in envs of its own"
                )
    return agents, _with_zero(observation), action


def _with_zero(space: spaces.Space) -> spaces.Space:
    """``space`` with Box bounds widened to hold the zero observation of masked agents
    (as SuperSuit's black-death wrapper does); other spaces hold zero already."""
    if isinstance(space, spaces.Box):
        low, high = np.minimum(space.low, 0), np.maximum(space.high, 0)
        if (low != space.low).any() or (high != space.high).any():
            return spaces.Box(low, high, space.shape, space.dtype)
    if isinstance(space, spaces.Dict):
        return spaces.Dict({k: _with_zero(s) for k, s in space.spaces.items()}, sort_keys=False)
    if isinstance(space, spaces.Tuple):
        return spaces.Tuple([_with_zero(s) for s in space.spaces])
    return space


class JointEnv(gymnasium.Env):
    """One PettingZoo parallel env as a Gymnasium env: the action is every agent's action
    along an agent axis, the observation an :class:`AgentSpaces` value. The reward is the
    sum over agents; the episode terminates or truncates when no agent is left.

    Attributes the env has and this class does not (``possible_agents``, ``state``, ...)
    are read from the env, so ``get_attr`` and ``call`` reach it.
    """

    def __init__(self, env: Any):
        self.env = env
        self.agents_order, observation, action = agent_spaces(env)
        self._position = {agent: k for k, agent in enumerate(self.agents_order)}
        count = len(self.agents_order)
        self.observation_space = AgentSpaces(self.agents_order, observation, action)
        self.action_space = batch_space(action, count)
        self.metadata = dict(getattr(env, "metadata", None) or {})
        self.render_mode = getattr(env, "render_mode", None)
        self._agent_space = observation
        self._zero = next(iterate(self.observation_space["observation"], self._zeros()))
        self._simple_actions = isinstance(
            action, (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)
        )

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or "env" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.env, name)

    def _zeros(self):
        return create_empty_array(self._agent_space, len(self.agents_order), fn=np.zeros)

    def _observation(self, observs: dict, live: set, rewards=None, terms=None, truncs=None):
        order = self.agents_order
        items = [observs[a] if a in observs else self._zero for a in order]
        stacked = concatenate(self._agent_space, items, self._zeros())
        get = dict.get
        return {
            "observation": stacked,
            "reward": np.array([get(rewards or {}, a, 0.0) for a in order], np.float64),
            "terminated": np.array([bool(get(terms or {}, a, False)) for a in order], np.int8),
            "truncated": np.array([bool(get(truncs or {}, a, False)) for a in order], np.int8),
            "mask": np.array([a in live for a in order], np.int8),
        }

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        observs, infos = self.env.reset(seed=seed, options=options)
        live = set(self.env.agents)
        return self._observation(observs, live), _agent_infos(infos)

    def step(self, action: Any):
        before = list(self.env.agents)
        split = action if self._simple_actions else list(iterate(self.action_space, action))
        actions = {agent: split[self._position[agent]] for agent in before}
        observs, rewards, terms, truncs, infos = self.env.step(actions)
        left = {a for a in before if terms.get(a) or truncs.get(a)}
        live = set(self.env.agents) - left
        # An agent that left before this step keeps its zero row.
        observs = {a: o for a, o in observs.items() if a in before or a in live}
        result = self._observation(observs, live, rewards, terms, truncs)
        over = not live
        truncated = over and any(bool(truncs.get(a)) for a in before)
        reward = float(sum(float(rewards.get(a, 0.0)) for a in before))
        return result, reward, over and not truncated, truncated, _agent_infos(infos)

    def render(self):
        return self.env.render()

    def close(self):
        self.env.close()


def _agent_infos(infos: dict | None) -> dict:
    """The agents' non-empty infos, under ``"agent_infos"``; an empty dict when none."""
    kept = {agent: info for agent, info in (infos or {}).items() if info}
    return {"agent_infos": kept} if kept else {}


class AgentRows:
    """How ``num_envs`` joint envs map to ``num_envs x num_agents`` rows, env by env."""

    def __init__(self, space: AgentSpaces, num_envs: int):
        self.space = space
        self.agents = space.agents
        self.num_agents = len(space.agents)
        self.num_envs = num_envs
        self.num_rows = num_envs * self.num_agents

    def flatten(self, joint_observ: dict, fold: bool = True) -> tuple:
        """``(observ, reward, terminated, truncated, mask)`` of the rows; with ``fold``
        the env and agent axes are one (``[num_rows, ...]``), else ``[envs, agents, ...]``."""
        observ = joint_observ["observation"]
        flags = [joint_observ[key] for key in _RESULT_KEYS]
        if fold:
            observ = _reshape(observ, (-1,))
            flags = [flag.reshape(-1) for flag in flags]
        reward = flags[0]
        terminated, truncated, mask = (flag.astype(bool) for flag in flags[1:])
        return observ, reward, terminated, truncated, mask

    def joint_actions(self, actions: Any) -> Any:
        """Row actions ``[num_rows, ...]`` as joint actions ``[num_envs, num_agents, ...]``."""
        return _reshape(actions, (self.num_envs, self.num_agents))

    def env_mask(self, row_mask: np.ndarray) -> np.ndarray:
        """The envs a row mask selects; ValueError unless it selects whole envs."""
        grouped = np.asarray(row_mask).reshape(self.num_envs, self.num_agents)
        whole = grouped.all(axis=1)
        if (grouped.any(axis=1) != whole).any():
            env = int(np.flatnonzero(grouped.any(axis=1) != whole)[0])
            raise ValueError(
                f"reset_mask selects some agents of env {env} (rows {env * self.num_agents}"
                f"..{(env + 1) * self.num_agents - 1}) but not all: the agents of one "
                "PettingZoo env reset together, so select all of its rows or none"
            )
        return whole

    def rows_of(self, env: int) -> range:
        return range(env * self.num_agents, (env + 1) * self.num_agents)

    def row_infos(self, env: int, info: dict) -> list[tuple[int, dict]]:
        """``(row, info)`` of each agent of ``env`` with an info of its own."""
        agent_infos = info.get("agent_infos", {})
        first = env * self.num_agents
        return [
            (first + k, agent_infos[agent])
            for k, agent in enumerate(self.agents)
            if agent in agent_infos
        ]

    def split_observ(self, joint_observ: dict) -> list:
        """One joint observation (of one env) as a list of the agents' observations."""
        return list(iterate(self.space["observation"], joint_observ["observation"]))


def _reshape(value: Any, shape: tuple) -> Any:
    """Reshape every array of a nest (dict/tuple of arrays) along its leading axes:
    ``(-1,)`` joins the first two axes, ``(n, k)`` splits the first."""
    if isinstance(value, dict):
        return {key: _reshape(item, shape) for key, item in value.items()}
    if isinstance(value, tuple):
        return tuple(_reshape(item, shape) for item in value)
    array = np.asarray(value)
    lead = 2 if shape == (-1,) else 1
    return array.reshape(*shape, *array.shape[lead:])


class AgentBatchEnv:
    """A BatchEnv of PettingZoo envs: arrays ``[num_envs, num_agents, ...]``.

    ``len()`` and ``reset(indices)`` count envs (the agents of an env reset together);
    ``step`` takes actions ``[num_envs, num_agents, ...]`` and returns ``(observ, reward,
    terminated, truncated, infos)`` with per-agent arrays and ``infos`` a dict:
    ``"agent_mask"`` (bool ``[num_envs, num_agents]``), ``"episode_terminated"`` and
    ``"episode_truncated"`` (bool ``[num_envs]``: the env's episode is over, every agent
    having left), and ``"agent_infos"`` (one dict per env, keyed by agent) when an agent
    had an info. An env whose episode is over must be reset before the next step.

    Args:
        batch: a BatchEnv whose envs are :class:`JointEnv`, as ``batchenv.make`` builds.
    """

    def __init__(self, batch: Any):
        space = batch.observation_space
        if not isinstance(space, AgentSpaces):
            raise TypeError(f"AgentBatchEnv needs a BatchEnv of JointEnvs, got spaces {space}")
        self.batch = batch
        self.num_envs = batch.num_envs
        self.agents = space.agents
        self.num_agents = len(space.agents)
        self.observation_space = space.agent_observation_space
        self.action_space = space.agent_action_space
        self.agent_mask = np.zeros((self.num_envs, self.num_agents), bool)
        self._rows = AgentRows(space, self.num_envs)

    def __len__(self) -> int:
        return self.num_envs

    @property
    def closed(self) -> bool:
        return self.batch.closed

    @property
    def steps(self) -> int:
        return self.batch.steps

    def processes(self):
        return self.batch.processes()

    def reset(self, indices=None, seed=None, options=None) -> tuple[Any, dict]:
        """Reset envs ``indices`` (all when None); returns ``(observ, infos)`` for them,
        ``observ`` ``[K, num_agents, ...]`` and ``infos["agent_mask"]`` ``[K, num_agents]``."""
        joint, raw = self.batch.reset(indices, seed, options)
        observ, _, _, _, mask = self._rows.flatten(joint, fold=False)
        rows = np.arange(self.num_envs) if indices is None else np.asarray(indices, np.int64)
        self.agent_mask[rows] = mask
        return observ, self._infos({"agent_mask": mask}, raw)

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        """Step every env with ``actions`` ``[num_envs, num_agents, ...]``."""
        joint, _, terminated, truncated, raw = self.batch.step(actions)
        observ, reward, agent_terminated, agent_truncated, mask = self._rows.flatten(
            joint, fold=False
        )
        self.agent_mask[:] = mask
        infos = {
            "agent_mask": mask,
            "episode_terminated": np.asarray(terminated, bool),
            "episode_truncated": np.asarray(truncated, bool),
        }
        return observ, reward, agent_terminated, agent_truncated, self._infos(infos, raw)

    @staticmethod
    def _infos(infos: dict, raw: tuple) -> dict:
        if any(info.get("agent_infos") for info in raw):
            infos["agent_infos"] = tuple(info.get("agent_infos", {}) for info in raw)
        return infos

    def call(self, name: str, *args, **kwargs) -> tuple:
        """Per env: ``name`` of the PettingZoo env, called when callable."""
        return self.batch.call(name, *args, **kwargs)

    def get_attr(self, name: str) -> tuple:
        return self.batch.get_attr(name)

    def set_attr(self, name: str, values: Any) -> None:
        self.batch.set_attr(name, values)

    def close(self, *args, **kwargs) -> list[str]:
        return self.batch.close(*args, **kwargs)

    def __enter__(self) -> AgentBatchEnv:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"AgentBatchEnv({self.num_envs} envs x {self.num_agents} agents, "
            f"observation {self.observation_space}, action {self.action_space})"
        )
