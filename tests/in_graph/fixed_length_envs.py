"""Test envs whose episodes end after a fixed number of steps (TF Agents' MockEnvironment).

Each env records the length of every episode it ran in ``steps`` (a reset appends 0, a
step adds 1 to the last entry), so a test reads exactly which episodes ran and for how
long, including the ones a forced reset cut short.

- ``FixedLengthEnv``: one Gymnasium env (for BatchEnvs).
- ``FixedLengthInGraphEnv``: a batch of them as an InGraphEnv (torch tensors).
- ``StandInBatchEnv``: a minimal in-process NumPy BatchEnv with the API of
  ``batchenv.BatchEnv`` (for developing without it).

Observation (float32 ``[3]``): steps taken in this episode, the episode length, and the
running sum of the actions. Reward: ``1 + sum(action)``. Actions: ``Discrete(3)``
(``"discrete"``) or ``Box(-1, 1, (2,))`` (``"box"``). ``nan_at=(what, step)`` makes the
observation or reward NaN at that step of the env's life (fault injection).
"""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import numpy as np
import torch

OBSERVATION_SPACE = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)


def action_space(kind: str) -> gym.Space:
    if kind == "discrete":
        return gym.spaces.Discrete(3)
    if kind == "box":
        return gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    raise ValueError(f"unknown action space kind {kind!r}")


class FixedLengthEnv(gym.Env):
    """A Gymnasium env whose episodes terminate after ``length`` steps."""

    def __init__(
        self, length: int, actions: str = "discrete", nan_at: tuple[str, int] | None = None
    ):
        self.length = length
        self.observation_space = OBSERVATION_SPACE
        self.action_space = action_space(actions)
        self.nan_at = nan_at
        self.steps: list[int] = []
        self.total_steps = 0
        self._action_sum = 0.0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.steps.append(0)
        self._action_sum = 0.0
        return self._observ(), {}

    def step(self, action):
        if not self.steps:
            raise RuntimeError("step() before reset()")
        self.steps[-1] += 1
        self.total_steps += 1
        self._action_sum += float(np.sum(action))
        reward = 1.0 + float(np.sum(action))
        observ = self._observ()
        if self.nan_at == ("reward", self.total_steps):
            reward = float("nan")
        if self.nan_at == ("observ", self.total_steps):
            observ[1] = np.nan
        return observ, reward, self.steps[-1] >= self.length, False, {}

    def _observ(self) -> np.ndarray:
        return np.array([self.steps[-1], self.length, self._action_sum], np.float32)


class FixedLengthInGraphEnv:
    """A batch of fixed-length envs as an InGraphEnv; row ``i`` ends after ``lengths[i]``.

    With ``record`` (eager only) the per-episode lengths are kept in ``steps[i]``.
    """

    def __init__(
        self,
        lengths: Sequence[int],
        actions: str = "discrete",
        device: str | torch.device = "cpu",
        record: bool = True,
        nan_at: tuple[str, int] | None = None,
    ):
        self.num_envs = len(lengths)
        self.device = torch.device(device)
        self.single_observation_space = OBSERVATION_SPACE
        self.single_action_space = action_space(actions)
        self.lengths = torch.as_tensor(list(lengths), dtype=torch.float32, device=self.device)
        self.t = torch.zeros(self.num_envs, device=self.device)
        self.action_sum = torch.zeros(self.num_envs, device=self.device)
        self.total_steps = 0
        self.record = record
        self.nan_at = nan_at
        self.steps: list[list[int]] = [[] for _ in lengths]

    def reset(self, indices: torch.Tensor) -> torch.Tensor:
        if self.record:
            for i in indices.tolist():
                self.steps[i].append(0)
        self.t = self.t.index_fill(0, indices, 0.0)
        self.action_sum = self.action_sum.index_fill(0, indices, 0.0)
        return self._observ()[indices]

    def step(self, action: torch.Tensor):
        if self.record:
            for row in self.steps:
                row[-1] += 1
        action = action.float().reshape(self.num_envs, -1).sum(-1)
        self.t = self.t + 1
        self.action_sum = self.action_sum + action
        reward = 1.0 + action
        observ = self._observ()
        terminated = self.t >= self.lengths
        if self.nan_at is not None:
            self.total_steps += 1
            what, at = self.nan_at
            if what == "reward" and at == self.total_steps:
                reward = reward.index_fill(0, torch.tensor([1]), float("nan"))
            if what == "observ" and at == self.total_steps:
                observ = observ.index_fill(0, torch.tensor([1]), float("nan"))
        return observ, reward, terminated, torch.zeros_like(terminated)

    def _observ(self) -> torch.Tensor:
        return torch.stack([self.t, self.lengths, self.action_sum], dim=-1)


class StandInBatchEnv:
    """In-process stand-in with the API of ``batchenv.BatchEnv`` (NumPy, no autoreset)."""

    def __init__(self, envs: Sequence[gym.Env]):
        self.envs = list(envs)
        self.num_envs = len(self.envs)
        self.observation_space = self.envs[0].observation_space
        self.action_space = self.envs[0].action_space

    def __len__(self) -> int:
        return self.num_envs

    def __getitem__(self, index: int) -> gym.Env:
        return self.envs[index]

    def reset(self, indices=None, seed=None, options=None):
        rows = np.arange(self.num_envs) if indices is None else np.asarray(indices).reshape(-1)
        results = [self.envs[r].reset(seed=None if seed is None else seed + int(r)) for r in rows]
        observ = np.stack([np.asarray(o) for o, _ in results])
        return observ, tuple(info for _, info in results)

    def step(self, actions):
        actions = np.asarray(actions)
        if len(actions) != self.num_envs:
            raise ValueError(f"got {len(actions)} actions for {self.num_envs} envs")
        results = [env.step(a) for env, a in zip(self.envs, actions)]
        observ, reward, terminated, truncated, infos = zip(*results)
        return (
            np.stack(observ),
            np.asarray(reward, np.float64),
            np.asarray(terminated, bool),
            np.asarray(truncated, bool),
            infos,
        )

    def get_attr(self, name: str) -> tuple:
        return tuple(getattr(env, name) for env in self.envs)

    def close(self) -> None:
        pass


class TwoAgentInGraphEnv(FixedLengthInGraphEnv):
    """Two agents per env (``num_agents = 2``): observ ``[B, 2, 3]``, reward ``[B, 2]``.

    Agent ``k`` sees the env's observation with ``k`` added to the action sum and earns
    ``1 + its own action``; both agents' episodes end together.
    """

    num_agents = 2

    def reset(self, indices: torch.Tensor) -> torch.Tensor:
        return self._per_agent(super().reset(indices))

    def step(self, action: torch.Tensor):
        observ, _, terminated, truncated = super().step(action)
        reward = 1.0 + action.float().reshape(self.num_envs, 2, -1).sum(-1)
        return self._per_agent(observ), reward, terminated, truncated

    def _per_agent(self, observ: torch.Tensor) -> torch.Tensor:
        offset = torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.0, 1.0]], device=observ.device)
        return observ[:, None, :] + offset
