"""One replay memory for the off-policy algorithms (DQN, SAC); docs/dqn.md.

    >>> from batchenv.algorithms.replay import ReplayMemory
    >>> import gymnasium as gym
    >>> memory = ReplayMemory(10_000, gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), 4,
    ...                       n_step=3, prioritized=True)
    >>> len(memory), memory.capacity
    (0, 10000)

Modules: ``memory`` (ReplayMemory, Batch), ``sum_tree`` (SumTree, the prioritized sampler).
"""

from .memory import Batch, ReplayMemory, torch_dtype
from .sum_tree import SumTree

__all__ = ["Batch", "ReplayMemory", "SumTree", "torch_dtype"]
