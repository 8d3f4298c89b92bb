"""Batched torch and Triton environments, installed as ``batchenv.kernels``.

The classic-control envs reproduce Gymnasium's CartPole-v1, Pendulum-v1,
MountainCarContinuous-v0 and Acrobot-v1 as InGraphEnvs (``batchenv.in_graph.env``);
``DiscreteTag`` and ``ContinuousTag`` are WarpDrive's multi-agent Tag games (an agent axis
after the batch axis); ``Asterix``, ``Breakout``, ``Freeway``, ``Seaquest`` and
``SpaceInvaders`` are MinAtar's games
(``batchenv.kernels.minatar``, docs/minatar.md)::

    >>> import torch
    >>> from batchenv.kernels import CartPole
    >>> env = CartPole(num_envs=4, seed=0)
    >>> observ = env.reset(torch.arange(4))
    >>> observ, reward, terminated, truncated = env.step(torch.zeros(4, dtype=torch.int64))
"""

from .acrobot import Acrobot
from .cartpole import CartPole
from .minatar import Asterix, Breakout, Freeway, Seaquest, SpaceInvaders
from .mountain_car import MountainCarContinuous
from .pendulum import Pendulum
from .tag_continuous import ContinuousTag
from .tag_discrete import DiscreteTag

__all__ = [
    "Acrobot",
    "Asterix",
    "Breakout",
    "CartPole",
    "ContinuousTag",
    "DiscreteTag",
    "Freeway",
    "MountainCarContinuous",
    "Pendulum",
    "Seaquest",
    "SpaceInvaders",
]
