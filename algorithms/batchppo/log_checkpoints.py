"""SLM Lab's log checkpoints for BatchPPO: a return every ``log_frequency`` train frames.

SLM Lab checkpoints a session every ``meta.log_frequency`` env frames (counted over all
envs), independent of when the algorithm updates: a checkpoint fires after the step at
which ``frame % log_frequency < num_envs``, and after the last frame. Its ``total_reward``
is the mean return of the last 100 training episodes finished by then (the episode queue
of Gymnasium's vector ``RecordEpisodeStatistics``, which SLM Lab reads), NaN before the
first one. Here the same happens inside BatchPPO's train phases, whose rounds hold
``update_every * max_length`` frames each; eval phases add no frames.

The finished episodes of each step stay on the env's device until a checkpoint needs
them, so tracking costs one host copy per checkpoint, not one per step.

    >>> checkpoints = LogCheckpoints(frequency=500, num_envs=30, last_frame=200_010)
    >>> checkpoints.step(done, score, updated=False)   # after every train-phase simulate()
    >>> checkpoints.take()                              # [(frame, total_reward, updates)]
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import torch

__all__ = ["RECENT_EPISODES", "LogCheckpoints"]

#: Finished training episodes a checkpoint's return averages (Gymnasium's buffer_length).
RECENT_EPISODES = 100


class LogCheckpoints:
    """Counts train frames and updates; records a checkpoint when one is due.

    Args:
        frequency: train frames between checkpoints (0: none).
        num_envs: rows stepped per ``simulate()`` call (frames per step).
        last_frame: the run's train-frame budget; the step that reaches it checkpoints too.
        frame: train frames done so far (a resumed run's).
    """

    def __init__(self, frequency: int, num_envs: int, last_frame: int, frame: int = 0):
        self.frequency = frequency
        self.num_envs = num_envs
        self.last_frame = last_frame
        self.frame = frame
        self.updates = 0
        self.recent: deque[float] = deque(maxlen=RECENT_EPISODES)
        self._pending: list[torch.Tensor] = []  # per step: the finished rows' returns, else NaN
        self._rows: list[tuple[int, float, int]] = []

    def step(self, done: torch.Tensor, score: torch.Tensor, updated: bool) -> None:
        """Account for one train-phase step: ``done`` and ``score`` as ``simulate()``
        returns them (``score`` ``[B]`` or ``[B, agents]``, averaged over agents)."""
        self.frame += self.num_envs
        self.updates += int(updated)
        if not self.frequency:
            return
        per_row = score.detach().reshape(score.shape[0], -1).float().mean(1)
        self._pending.append(torch.where(done, per_row, torch.nan))
        if self.frame % self.frequency < self.num_envs or self.frame >= self.last_frame:
            self._collect()
            mean = sum(self.recent) / len(self.recent) if self.recent else math.nan
            self._rows.append((self.frame, mean, self.updates))

    def take(self) -> list[tuple[int, float, int]]:
        """The checkpoints since the last call: ``(frame, total_reward, updates so far)``."""
        rows, self._rows = self._rows, []
        return rows

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs (taken between rounds, when nothing is pending)."""
        self._collect()
        return {"frame": self.frame, "updates": self.updates, "recent": list(self.recent)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.frame = int(state["frame"])
        self.updates = int(state["updates"])
        self.recent.clear()
        self.recent.extend(float(value) for value in state["recent"])

    def _collect(self) -> None:
        """Move the pending steps' finished returns, in order, into ``recent``."""
        if not self._pending:
            return
        returns = torch.stack(self._pending).cpu().flatten()
        self._pending = []
        self.recent.extend(returns[~torch.isnan(returns)].tolist())
