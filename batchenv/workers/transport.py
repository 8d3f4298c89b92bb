"""The one seam between a BatchEnv and its envs: the :class:`Transport` protocol, and
:class:`Results`, the one shape every transport returns.

Two transports implement it: :class:`~batchenv.workers.list_transport.ListTransport` (one
env object per row: in-process Gymnasium envs or ExternalProcess workers, the TF Agents
way) and :class:`~batchenv.workers.shared_memory_transport.SharedMemoryTransport` (worker
processes hosting several envs each, exchanging data through shared memory).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from batchenv.errors import WorkerTimeoutError


@dataclass
class Results:
    """What a call returned for its rows, in the order of the rows.

    ``observ`` holds one array per leaf of the observation space; ``reward`` and the flags
    are None after a reset; ``infos`` maps a row to its env's non-empty info.
    """

    observ: list[np.ndarray]
    reward: np.ndarray | None = None
    terminated: np.ndarray | None = None
    truncated: np.ndarray | None = None
    infos: dict[int, Any] = field(default_factory=dict)


class Transport(Protocol):
    """How a BatchEnv moves actions to its envs and results back."""

    num_envs: int
    observation_space: Any
    action_space: Any
    reset_ahead: bool
    """True when a step that ends an episode resets that env at once in its worker
    (:meth:`take_ready` then hands out the new observation)."""

    def start(
        self,
        kind: str,
        rows: np.ndarray,
        actions: list[np.ndarray] | None,
        reset_args: dict | None,
        command: np.ndarray | None = None,
        step: int | None = None,
    ) -> None:
        """Begin ``kind`` ("step", "reset", or "mixed" with one ``command`` per row) for
        ``rows``; ``actions`` has one array per action leaf covering every row;
        ``reset_args`` maps a row to its ``(seed, options)``."""

    def finish(self, deadline: float | None, step: int) -> Results:
        """Wait (until ``deadline``, a ``time.monotonic()`` value) for what was started."""

    def take_ready(self, rows: np.ndarray) -> tuple[list[np.ndarray], dict | None] | None:
        """Observations and infos of ``rows`` if all were reset ahead, else None."""

    def env_objects(self) -> Sequence[Any] | None:
        """The env object of each row, or None when rows have no object here."""

    def call(self, row: int, name: str, args: tuple, kwargs: dict) -> Any: ...

    def get_attr(self, row: int, name: str) -> Any: ...

    def set_attr(self, row: int, name: str, value: Any) -> None: ...

    def processes(self) -> list:
        """The worker processes (ExternalProcess) behind the rows."""

    def close(self, timeout: float) -> list[str]:
        """Close the envs and end the workers; returns the problems envs reported."""

    def terminate(self) -> None:
        """Kill the workers at once."""


def check_same_spaces(spaces: Sequence[tuple], what: str = "env") -> None:
    """ValueError unless every (observation_space, action_space) pair is equal."""
    observ0, action0 = spaces[0]
    for index, (observ, action) in enumerate(spaces):
        if observ != observ0:
            raise ValueError(
                f"{what} {index} has observation space {observ}, but {what} 0 has {observ0}; "
                "all envs of a BatchEnv must share observation and action spaces"
            )
        if action != action0:
            raise ValueError(
                f"{what} {index} has action space {action}, but {what} 0 has {action0}; "
                "all envs of a BatchEnv must share observation and action spaces"
            )


def slow_rows_error(error: WorkerTimeoutError, rows: list[int]) -> WorkerTimeoutError:
    """The timeout of a whole call: every row in ``rows`` was still unanswered."""
    return WorkerTimeoutError(
        f"envs {rows} did not answer within the deadline at step {error.step}; their workers "
        f"were terminated (first: {error})",
        worker=error.worker,
        env_index=int(rows[0]),
        env_indices=tuple(int(r) for r in rows),
        step=error.step,
        env_description=error.env_description,
    )
