"""Every way a finished episode is reset, in one place: the per-row commands a worker runs,
what it does when an episode ends, and the parent's bookkeeping of rows reset ahead.

Per-row commands (a byte per row in the shared ``command`` array):

- ``STEP``: step; a finished episode stays finished until the parent resets the row.
- ``RESET``: reset (with the seed and options the parent sent, if any); reward 0, flags off.
- ``SAME_STEP``: step and, when the episode ends, reset at once (Gymnasium's SAME_STEP
  autoreset): the row holds the new episode's first observation and its info is
  ``("same_step", final_observ, final_info, reset_info)``.
- ``STEP_AHEAD``: step and, when the episode ends, keep the terminal observation in
  ``observ`` and reset at once into the ``ahead`` buffers, so that the parent's later
  ``reset(indices)`` of that row needs no round trip (:class:`ResetAhead`); its info is
  ``("reset_ahead", step_info, reset_info)``.

Gymnasium's NEXT_STEP autoreset (and EnvPool's) is ``RESET`` sent for a row that finished
at the previous step: :func:`vector_commands`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from batchenv.workers.protocol import IDLE, RESET, SAME_STEP, STEP, STEP_AHEAD

__all__ = [
    "IDLE",
    "RESET",
    "SAME_STEP",
    "STEP",
    "STEP_AHEAD",
    "ResetAhead",
    "end_episode",
    "split_same_step",
    "vector_commands",
]


def end_episode(env, todo: int, observ, info: dict, write_ahead: Callable, row: int):
    """What a worker does after ``env.step`` ended an episode under command ``todo``.

    Returns ``(observ, info)`` to report for the row: unchanged for STEP, the new
    episode's for SAME_STEP; STEP_AHEAD writes the new episode's first observation with
    ``write_ahead(row, observ)``.
    """
    if todo == SAME_STEP:
        reset_observ, reset_info = env.reset()
        return reset_observ, ("same_step", observ, info, reset_info)
    if todo == STEP_AHEAD:
        next_observ, next_info = env.reset()
        write_ahead(row, next_observ)
        if info or next_info:
            info = ("reset_ahead", info, next_info)
    return observ, info


def split_same_step(info):
    """``(final_observ, final_info, info)`` of a SAME_STEP row that reset, else None."""
    if isinstance(info, tuple) and info and info[0] == "same_step":
        return info[1], info[2], info[3]
    return None


def vector_commands(mode, finished: np.ndarray) -> np.ndarray | None:
    """The per-row commands of a step under Gymnasium autoreset ``mode`` (NEXT_STEP,
    SAME_STEP or DISABLED, by value), or None when every row just steps: NEXT_STEP resets
    the rows in ``finished`` (the rows whose episode ended at the previous step) instead
    of stepping them."""
    value = getattr(mode, "value", mode)  # gymnasium.vector.AutoresetMode or its value
    if value == "NextStep":
        return np.where(finished, RESET, STEP).astype(np.uint8) if finished.any() else None
    if value == "SameStep":
        return np.full(len(finished), SAME_STEP, np.uint8)
    if value == "Disabled":
        return None
    raise ValueError(f"unknown autoreset mode {mode!r}")


class ResetAhead:
    """The parent's record of rows whose worker reset them ahead (STEP_AHEAD).

    After a step, :meth:`after_step` marks the finished rows ready and keeps their reset
    infos; :meth:`take` hands out the observations of rows that are all ready, which makes
    those rows reset without asking any worker.
    """

    def __init__(self, num_envs: int, ahead: list[np.ndarray]):
        self.ready = np.zeros(num_envs, bool)
        self.infos: dict[int, dict] = {}
        self.ahead = ahead

    def after_step(self, terminated: np.ndarray, truncated: np.ndarray, infos: dict) -> None:
        """Record the rows a STEP_AHEAD step finished; unwrap their infos in place."""
        done = np.flatnonzero(terminated | truncated)
        if not len(done):
            return
        self.ready[done] = True
        for row in done.tolist():
            info = infos.get(row)
            if isinstance(info, tuple) and info and info[0] == "reset_ahead":
                infos[row], self.infos[row] = info[1], info[2]
            else:
                self.infos.pop(row, None)

    def forget(self, rows) -> None:
        """``rows`` are about to run a command: what was reset ahead no longer holds."""
        self.ready[rows] = False

    def take(self, rows: np.ndarray) -> tuple[list[np.ndarray], dict | None] | None:
        """Observations and reset infos of ``rows`` if every one was reset ahead (they are
        then reset); None otherwise."""
        ready = self.ready
        if not len(rows) or not ready[rows].all():
            return None
        ready[rows] = False
        infos = self.infos
        raw = {row: infos.pop(row, {}) for row in rows.tolist()} if infos else None
        return [ahead[rows] for ahead in self.ahead], raw

    def take_infos(self, rows) -> dict:
        """The reset infos of ``rows`` (reset ahead), which stop being ready."""
        infos = {}
        for row in rows:
            infos[row] = self.infos.pop(row, {})
            self.ready[row] = False
        return infos
