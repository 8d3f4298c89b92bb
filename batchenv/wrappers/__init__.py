"""Gymnasium wrappers, written for Gymnasium 1.x.

- :mod:`batchenv.wrappers.batch_ppo`: the wrappers batch-ppo (TF Agents) ships —
  ``RangeNormalize``, ``ClipAction``, ``ConvertTo32Bit``, ``FrameHistory``, ``FrameDelta``,
  ``ActionRepeat``, ``RandomStart`` (time limits stay Gymnasium truncation).
- :mod:`batchenv.wrappers.atari`: the DeepMind Atari preprocessing — :func:`make_atari` and
  ``NoopReset``, ``MaxAndSkip``, ``EpisodicLife``, ``GrayResize``, ``ClipReward``.

Every name is importable from here: ``from batchenv.wrappers import ClipAction, make_atari``.
"""

from .atari import ClipReward, EpisodicLife, GrayResize, MaxAndSkip, NoopReset, make_atari
from .batch_ppo import (
    ActionRepeat,
    ClipAction,
    ConvertTo32Bit,
    FrameDelta,
    FrameHistory,
    RandomStart,
    RangeNormalize,
    StepResult,  # noqa: F401 -- a type alias, not in __all__, importable from here as before
)

__all__ = [
    "ActionRepeat",
    "ClipAction",
    "ClipReward",
    "ConvertTo32Bit",
    "EpisodicLife",
    "FrameDelta",
    "FrameHistory",
    "GrayResize",
    "MaxAndSkip",
    "NoopReset",
    "RandomStart",
    "RangeNormalize",
    "make_atari",
]
