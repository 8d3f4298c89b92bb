"""PPO as PureJaxRL and CleanRL write it, on the four methods, compiled (docs/ppo.md).

>>> from batchenv.algorithms.ppo import PPOConfig, train
>>> result = train(PPOConfig(total_timesteps=4096, compile=False))
"""

from .algorithm import PPO
from .config import PRESETS, PPOConfig, make_config
from .train import PPOResult, train

__all__ = ["PPO", "PPOConfig", "PPOResult", "PRESETS", "make_config", "train"]
