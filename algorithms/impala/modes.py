"""The trainer class of each ``ImpalaConfig.mode``, imported only when asked for."""

from __future__ import annotations

__all__ = ["trainer_class"]


def trainer_class(mode: str):
    """SyncTrainer ('sync'), AsyncTrainer ('async') or DistributedTrainer ('distributed')."""
    if mode == "async":
        from .async_mode import AsyncTrainer

        return AsyncTrainer
    if mode == "distributed":
        from .distributed import DistributedTrainer

        return DistributedTrainer
    if mode == "sync":
        from .sync import SyncTrainer

        return SyncTrainer
    raise ValueError(f"IMPALA mode must be 'sync', 'async' or 'distributed', got {mode!r}")
