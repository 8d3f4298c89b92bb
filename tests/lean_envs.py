"""Test envs in a module that imports nothing heavy, so workers can load it lean."""

import os
import sys

import gymnasium as gym
import numpy as np


class ModulesProbe(gym.Env):
    """Reports which heavy modules its (worker) process has imported."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self):
        self.has_torch = "torch" in sys.modules
        self.pid = os.getpid()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        return np.zeros(1, np.float32), 0.0, False, False, {}
