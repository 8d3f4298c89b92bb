"""A fake Atari env with the ALE's interface, for the preprocessing-wrapper tests.

``FakeAtari`` returns ``(210, 160, 3)`` uint8 RGB screens whose pixels all equal the frame
number (mod 256) on odd frames and 0 on even ones (sprite flicker), reward 1 every frame,
loses a life every ``frames_per_life`` frames and ends when the lives run out.
``env.unwrapped.ale.lives()`` works as with ale-py. Every action is recorded.

    >>> env = FakeAtari(lives=2, frames_per_life=3)
    >>> int(env.reset(seed=0)[0].max()), env.unwrapped.ale.lives()
    (0, 2)
"""

from __future__ import annotations

import gymnasium
import numpy as np
from gymnasium import spaces


class _Ale:
    def __init__(self, env: FakeAtari):
        self._env = env

    def lives(self) -> int:
        return self._env.lives


class FakeAtari(gymnasium.Env):
    """See the module docstring."""

    def __init__(self, lives: int = 3, frames_per_life: int = 50, shape=(210, 160, 3)):
        self.observation_space = spaces.Box(0, 255, shape, np.uint8)
        self.action_space = spaces.Discrete(6)
        self.start_lives, self.frames_per_life, self.shape = lives, frames_per_life, shape
        self.ale = _Ale(self)
        self.actions: list[int] = []
        self.resets = 0
        self.frame = 0
        self.lives = lives

    def get_action_meanings(self) -> list[str]:
        return ["NOOP", "FIRE", "RIGHT", "LEFT", "RIGHTFIRE", "LEFTFIRE"]

    def _screen(self) -> np.ndarray:
        value = self.frame % 256 if self.frame % 2 else 0
        return np.full(self.shape, value, np.uint8)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.resets += 1
        self.frame, self.lives = 0, self.start_lives
        return self._screen(), {"lives": self.lives}

    def step(self, action):
        self.actions.append(int(action))
        self.frame += 1
        if self.frame % self.frames_per_life == 0:
            self.lives -= 1
        return self._screen(), 1.0, self.lives == 0, False, {"lives": self.lives}
