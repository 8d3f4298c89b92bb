"""A minimal stand-in for ``simulate()`` and small envs to drive BatchPPO in its tests.

``Loop.step`` follows the simulate() contract (docs/concepts.md): reset the rows that are
done (all on a forced reset) and call ``begin_episodes``; ``perform``; step; ``experience``;
``end_episodes`` for rows that finished.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch


class GymRows:
    """A list of Gymnasium envs as one batch: ``reset(rows)``, ``step(action)``, no autoreset."""

    def __init__(self, make, count: int, seed: int = 0):
        self.envs = [make() for _ in range(count)]
        self.seeds = [seed + index for index in range(count)]
        self.observation_space = self.envs[0].observation_space
        self.action_space = self.envs[0].action_space

    def reset(self, rows: torch.Tensor) -> torch.Tensor:
        observs = []
        for row in rows.tolist():
            seed, self.seeds[row] = self.seeds[row], None
            observs.append(self.envs[row].reset(seed=seed)[0])
        return torch.as_tensor(np.stack(observs), dtype=torch.float32)

    def step(self, action: torch.Tensor):
        results = [env.step(a) for env, a in zip(self.envs, action.numpy())]
        observ, reward, terminated, truncated, _ = zip(*results)
        return (
            torch.as_tensor(np.stack(observ), dtype=torch.float32),
            torch.as_tensor(reward, dtype=torch.float32),
            torch.as_tensor(terminated),
            torch.as_tensor(truncated),
        )


class CountdownEnv(gym.Env):
    """Observation ``[steps left / length]``; reward 1 per step; the episode ends after
    ``length`` steps, terminated or (``truncate=True``) truncated. Any action is accepted."""

    def __init__(self, length: int, truncate: bool = False, discrete: bool = True):
        self.length, self.truncate = length, truncate
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.action_space = (
            gym.spaces.Discrete(2) if discrete else gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        )
        self.t = 0

    def _observ(self):
        return np.array([(self.length - self.t) / self.length], np.float32)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._observ(), {}

    def step(self, action):
        self.t += 1
        end = self.t >= self.length
        return self._observ(), 1.0, end and not self.truncate, end and self.truncate, {}


class Loop:
    """Drives ``algo`` on ``envs`` one lockstep step at a time, like ``simulate()``."""

    def __init__(self, envs, algo):
        self.envs, self.algo = envs, algo
        count = len(envs.envs)
        self.done = torch.ones(count, dtype=torch.bool)
        self.observ = None
        self.length = torch.zeros(count, dtype=torch.int64)
        self.finished: list[int] = []  # lengths of finished episodes, in order
        self.summaries: list[dict] = []  # non-empty summaries returned by experience()

    def step(self, reset: bool = False):
        rows = torch.nonzero(self.done | reset).flatten()
        if len(rows):
            fresh = self.envs.reset(rows)
            if self.observ is None:
                self.observ = torch.zeros(len(self.done), *fresh.shape[1:])
            self.observ[rows] = fresh
            self.length[rows] = 0
            self.algo.begin_episodes(rows)
        prev = self.observ.clone()
        action = self.algo.perform(prev)
        observ, reward, terminated, truncated = self.envs.step(action)
        done = terminated | truncated
        self.length += 1
        summaries = self.algo.experience(prev, action, reward, done, observ, truncated)
        if summaries:
            self.summaries.append(summaries)
        ended = torch.nonzero(done).flatten()
        if len(ended):
            self.finished.extend(self.length[ended].tolist())
            self.algo.end_episodes(ended)
        self.observ, self.done = observ, done
        return action

    def run(self, steps: int) -> None:
        for _ in range(steps):
            self.step()
