"""BatchPPO, the TF Agents algorithm (batch-ppo v1.4) for batchenv.

    >>> from batchenv.algorithms.batchppo import PRESETS, BatchPPO
    >>> import gymnasium as gym
    >>> config = PRESETS["cartpole"].replace(num_agents=8)
    >>> env = gym.make(config.env)
    >>> algo = BatchPPO(env.observation_space, env.action_space, config)

Modules: ``config`` (BatchPPOConfig, PRESETS), ``networks`` (policy and value nets, KL),
``normalize`` (streaming normaliser), ``memory`` (padded episode store), ``losses``
(returns, GAE, PPO losses, the beta rule), ``algorithm`` (the BatchPPO class), ``envs``
(the env stack it trains on), ``train`` (the training loop: ``train()``, ``evaluate()``),
``cli`` (``batchenv train batchppo`` / ``batchenv evaluate``).
"""

from .algorithm import BatchPPO
from .config import PRESETS, BatchPPOConfig, field_help, parse_overrides
from .memory import EpisodeMemory, Episodes
from .normalize import StreamingNormalize
from .train import evaluate, train

__all__ = [
    "PRESETS",
    "BatchPPO",
    "BatchPPOConfig",
    "EpisodeMemory",
    "Episodes",
    "StreamingNormalize",
    "evaluate",
    "field_help",
    "parse_overrides",
    "train",
]
