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


class ScalarInfoEnv(gym.Env):
    """Puts NumPy and Python scalars of several types into the info of every step."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        info = {
            "f64": np.float64(self.t / 3),
            "f32": np.float32(-self.t / 7),
            "f16": np.float16(0.1),
            "i64": np.int64(-self.t),
            "i32": np.int32(self.t),
            "u8": np.uint8(self.t % 256),
            "bool": np.bool_(self.t % 2),
            "nan": np.float64("nan"),
            "neg_zero": np.float64(-0.0),
            "py": self.t / 3,
            "array": np.arange(3.0) * self.t,
        }
        return np.zeros(1, np.float32), 0.0, False, False, info
