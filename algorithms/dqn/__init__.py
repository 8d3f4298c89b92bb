"""DQN, Double DQN, prioritized replay and n-step returns on the four methods (docs/dqn.md).

    >>> from batchenv.algorithms.dqn import PRESETS, DQN
    >>> import gymnasium as gym
    >>> env = gym.make("CartPole-v1")
    >>> algo = DQN(env.observation_space, env.action_space, PRESETS["cartpole"], num_envs=1)

Modules: ``config`` (DQNConfig, PRESETS), ``networks`` (the Q-network), ``losses`` (the
DQN and Double-DQN targets, the TD loss), ``algorithm`` (the DQN class), ``train`` (the
training loop: ``train()``, ``evaluate()``), ``cli`` (``batchenv train dqn`` /
``batchenv evaluate``), ``session`` (the trainer of ``batchenv run`` specs). The replay
memory is :mod:`batchenv.algorithms.replay`, shared with SAC.
"""

from .algorithm import DQN, linear_schedule
from .config import PRESETS, DQNConfig, field_help, parse_overrides
from .losses import td_loss, td_target
from .networks import QNetwork
from .train import evaluate, train

__all__ = [
    "DQN",
    "PRESETS",
    "DQNConfig",
    "QNetwork",
    "evaluate",
    "field_help",
    "linear_schedule",
    "parse_overrides",
    "td_loss",
    "td_target",
    "train",
]
