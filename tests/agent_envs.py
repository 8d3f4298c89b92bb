"""Scripted PettingZoo-style parallel envs for the multi-agent tests (no PettingZoo needed:
batchenv recognises a parallel env by its API).

:class:`Relay` has three agents whose comings and goings are fixed, so every row of every
step can be written down by hand:

- ``a0`` acts from the reset and terminates at step 2;
- ``a1`` is absent at the reset, joins after step 1 and truncates at step 4;
- ``a2`` acts from the reset, has an info at every step and truncates at step 4.

Observation of agent ``k`` at time ``t``: ``[t, 10 * k + seed]``; reward of agent ``k``
for action ``a`` at step ``t``: ``100 * t + 10 * k + a``. Stepping an agent that is not
in ``agents`` raises, so a test fails if a masked agent is ever stepped.
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

AGENTS = ("a0", "a1", "a2")


class Relay:
    """A parallel env with agents that leave and join (see the module doc)."""

    metadata = {"name": "relay_v0"}

    def __init__(self, low: float = 0.0):
        self.possible_agents = list(AGENTS)
        self.agents: list[str] = []
        self._observation_space = spaces.Box(low, 100.0, (2,), np.float32)
        self._action_space = spaces.Discrete(3)
        self.seed = 0
        self.t = 0
        self.stepped: list[dict] = []

    def observation_space(self, agent):
        return self._observation_space

    def action_space(self, agent):
        return self._action_space

    def _observe(self, agent: str) -> np.ndarray:
        return np.array([self.t, 10 * AGENTS.index(agent) + self.seed], np.float32)

    def reset(self, seed=None, options=None):
        self.seed = 0 if seed is None else int(seed)
        self.t = 0
        self.agents = ["a0", "a2"]
        return {a: self._observe(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        if set(actions) != set(self.agents):
            raise KeyError(f"actions for {sorted(actions)}, but the agents are {self.agents}")
        self.stepped.append(dict(actions))
        self.t += 1
        t, before = self.t, list(self.agents)
        rewards = {a: float(100 * t + 10 * AGENTS.index(a) + int(actions[a])) for a in before}
        terms = {a: a == "a0" and t == 2 for a in before}
        truncs = {a: a in ("a1", "a2") and t == 4 for a in before}
        infos = {a: ({"seen": t} if a == "a2" else {}) for a in before}
        after = [a for a in before if not (terms[a] or truncs[a])]
        if t == 1:
            after = ["a0", "a1", "a2"]
        observs = {a: self._observe(a) for a in set(before) | set(after)}
        self.agents = after
        return observs, rewards, terms, truncs, infos

    def render(self):
        return None

    def close(self):
        pass


class Mixed(Relay):
    """Agents with different observation spaces: cannot be batched one row per agent."""

    def observation_space(self, agent):
        if agent == "a2":
            return spaces.Box(0.0, 100.0, (3,), np.float32)
        return self._observation_space


class TurnBased:
    """Looks like a PettingZoo AEC env: agents act in turn."""

    possible_agents = ["a0", "a1"]

    def agent_iter(self):
        return iter(self.possible_agents)


class Tenths:
    """Two agents whose rewards float32 cannot hold: agent ``k`` gets ``(t + 10 * k + a)
    / 10`` for action ``a`` at step ``t`` (0.1, 1.1, 0.3, ...); both truncate at step 3."""

    metadata = {"name": "tenths_v0"}
    possible_agents = ["a0", "a1"]

    def __init__(self):
        self.agents: list[str] = []
        self.t = 0

    def observation_space(self, agent):
        return spaces.Box(0.0, 10.0, (1,), np.float32)

    def action_space(self, agent):
        return spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        self.agents, self.t = list(self.possible_agents), 0
        return {a: np.zeros(1, np.float32) for a in self.agents}, {}

    def step(self, actions):
        self.t += 1
        rewards = {a: reward(self.t, k, actions[a]) for k, a in enumerate(self.agents)}
        over = self.t == 3
        observs = {a: np.full(1, self.t, np.float32) for a in self.agents}
        flags = {a: False for a in self.agents}
        truncs = {a: over for a in self.agents}
        self.agents = [] if over else self.agents
        return observs, rewards, flags, truncs, {}

    def render(self):
        return None

    def close(self):
        pass


def reward(t: int, k: int, action: int) -> float:
    """Tenths' reward of agent ``k`` for ``action`` at step ``t``."""
    return (t + 10 * k + int(action)) / 10
