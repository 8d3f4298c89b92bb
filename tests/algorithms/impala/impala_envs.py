"""Tiny envs for the IMPALA tests: a fast counting env and fault-injecting variants.

Actor processes import them by reference (``tests.algorithms.impala.impala_envs``; the
repository root is on ``sys.path``, see tests/conftest.py), so constructors are
``functools.partial`` of these module-level classes.

    >>> env = CountingEnv(episode_length=3)
    >>> env.reset(seed=0)[0].tolist()
    [0.0, 0.0]
    >>> [env.step(1)[1:3] for _ in range(3)]
    [(1.0, False), (1.0, False), (1.0, True)]
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import gymnasium
import numpy as np
from gymnasium import spaces


class CountingEnv(gymnasium.Env):
    """Observation ``[t / episode_length, last action]``; reward 1 for action 1, else 0;
    terminates after ``episode_length`` steps. Discrete(2) actions."""

    def __init__(self, episode_length: int = 10):
        self.episode_length = episode_length
        self.observation_space = spaces.Box(-1.0, 2.0, (2,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        observ = np.array([self.t / self.episode_length, float(action)], np.float32)
        return observ, float(action == 1), self.t >= self.episode_length, False, {}


class FaultAfterEnv(CountingEnv):
    """A CountingEnv that faults at its ``at_step``-th step (counted over all episodes).

    ``fault``: "raise" (RuntimeError), "kill" (SIGKILL to its own process), "hang" (sleeps
    60 s). With ``marker``, it faults only while that file does not exist and creates it
    first, so exactly one process faults (the replacement actor runs normally).
    """

    def __init__(self, fault: str, at_step: int = 5, marker: str | None = None):
        super().__init__(episode_length=10)
        self.fault, self.at_step, self.marker = fault, at_step, marker
        self.steps = 0

    def step(self, action):
        self.steps += 1
        if self.steps == self.at_step and self._armed():
            if self.fault == "raise":
                raise RuntimeError(f"FaultAfterEnv: planned failure at step {self.steps}")
            if self.fault == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if self.fault == "hang":
                time.sleep(60.0)
        return super().step(action)

    def _armed(self) -> bool:
        if self.marker is None:
            return True
        try:
            with open(Path(self.marker), "x"):
                return True
        except FileExistsError:
            return False


class ImageEnv(CountingEnv):
    """A CountingEnv whose observations are ``(4, 84, 84)`` uint8 frames filled with ``t``
    (an Atari-shaped observation for the Atari-net path)."""

    def __init__(self, episode_length: int = 10):
        super().__init__(episode_length)
        self.observation_space = spaces.Box(0, 255, (4, 84, 84), np.uint8)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros((4, 84, 84), np.uint8), {}

    def step(self, action):
        _, reward, terminated, truncated, info = super().step(action)
        return np.full((4, 84, 84), self.t, np.uint8), reward, terminated, truncated, info
