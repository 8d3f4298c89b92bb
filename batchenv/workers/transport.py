"""The one seam between a BatchEnv and its envs: the :class:`Transport` protocol, and
:class:`Results`, the one shape every transport returns.

Three transports implement it: :class:`~batchenv.workers.list_transport.ListTransport`
(one env object per row: in-process Gymnasium envs or ExternalProcess workers, the TF
Agents way), :class:`~batchenv.workers.shared_memory_transport.SharedMemoryTransport`
(worker processes hosting several envs each, exchanging data through shared memory) and
:class:`~batchenv.workers.ray_transport.RayTransport` (worker groups as Ray actors, each a
shared-memory group on its node).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from batchenv.errors import SpacesMismatchError, WorkerTimeoutError


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


class RowCalls:
    """``call``, ``get_attr`` and ``set_attr`` of a transport whose rows are reached
    through ``_on_row(row, method, *args)`` (the env's worker, or the parent's share)."""

    num_envs: int

    def call(self, row: int, name: str, args: tuple, kwargs: dict) -> Any:
        return self._on_row(row, "call", name, args, kwargs)

    def get_attr(self, row: int, name: str) -> Any:
        return self._on_row(row, "get_attr", name)

    def set_attr(self, row: int, name: str, value: Any) -> None:
        self._on_row(row, "set_attr", name, value)

    def _on_row(self, row: int, method: str, *args) -> Any:
        raise NotImplementedError

    def _check_row(self, row: int) -> None:
        if not 0 <= row < self.num_envs:
            raise IndexError(f"env index {row} out of range for {self.num_envs} envs")


def check_same_spaces(
    spaces: Sequence[tuple], what: str = "env", names: Sequence | None = None, exact: bool = True
) -> None:
    """SpacesMismatchError (also a ValueError) unless every (observation_space,
    action_space) pair is equal to the first; with ``exact=False``, unless every pair has
    the first's shared-memory layout (the shapes and dtypes of its leaves), which is all a
    shared block needs (``BatchVectorEnv`` then checks the spaces as Gymnasium does)."""
    names = list(names) if names is not None else [f"{what} {i}" for i in range(len(spaces))]
    same = (lambda a, b: a == b) if exact else _same_layout
    for index, pair in enumerate(spaces):
        for kind, space, first in zip(("observation", "action"), pair, spaces[0]):
            if not same(space, first):
                raise SpacesMismatchError(
                    f"{names[index]} has {kind} space {space}, but {names[0]} has {first}; "
                    "all envs of a BatchEnv must share observation and action spaces"
                    + ("" if exact else " of one shape and dtype")
                )


def _same_layout(a, b) -> bool:
    from batchenv import spaces as batch_spaces

    try:
        leaves_a, leaves_b = batch_spaces.leaves(a), batch_spaces.leaves(b)
        return len(leaves_a) == len(leaves_b) and all(
            batch_spaces.leaf_layout(x) == batch_spaces.leaf_layout(y)
            for x, y in zip(leaves_a, leaves_b)
        )
    except (TypeError, ValueError):
        return a == b


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
