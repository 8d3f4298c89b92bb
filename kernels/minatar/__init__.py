"""MinAtar's games (Young & Tian, 2019) as batched torch envs: see docs/minatar.md.

>>> import torch
>>> from batchenv.kernels.minatar import Breakout
>>> env = Breakout(num_envs=8, seed=0)
>>> observ, reward, terminated, truncated = env.step(torch.zeros(8, dtype=torch.int64))
"""

from ._base import Draw, MinAtarEnv
from .asterix import Asterix
from .breakout import Breakout
from .freeway import Freeway
from .seaquest import Seaquest
from .space_invaders import SpaceInvaders

__all__ = [
    "Asterix",
    "Breakout",
    "Draw",
    "Freeway",
    "MinAtarEnv",
    "Seaquest",
    "SpaceInvaders",
]
