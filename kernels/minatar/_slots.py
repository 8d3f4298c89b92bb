"""Python lists as fixed blocks of slots, in plain tensor code (used by ``seaquest.py``).

A MinAtar list of entries ``[x, y, right, *timers]`` becomes an int64 table
``[K, slots, columns]`` per row, column 0 an ``alive`` flag, the entries in list order from
slot 0 and zeros after them. A step works on the columns (``unpack``: ``fish_x``,
``fish_alive``, ...; the ``alive`` and ``right`` columns as bool), appends at the list's end
and clears ``alive`` to remove; ``pack`` closes the gaps, keeping the order, so the slot
index is MinAtar's list index again.

``lists`` maps a list's name to ``(slots, column names)``.
"""

from __future__ import annotations

import torch

_INT = torch.int64
_FLAGS = ("alive", "right")  # bool while a step works on them

Lists = dict[str, tuple[int, tuple[str, ...]]]


def unpack(state: dict[str, torch.Tensor], lists: Lists) -> dict[str, torch.Tensor]:
    """``state`` with each list table split into its columns, named ``{list}_{column}``."""
    s = {key: value for key, value in state.items() if key not in lists}
    for name, (_, columns) in lists.items():
        for column, values in zip(columns, state[name].unbind(dim=2)):
            s[f"{name}_{column}"] = values != 0 if column in _FLAGS else values
    return s


def pack(s: dict[str, torch.Tensor], lists: Lists) -> dict[str, torch.Tensor]:
    """The columns put back into their tables, each list compacted (order kept, empty slots
    zero): one scatter per list."""
    columns_of = {f"{name}_{column}" for name, (_, columns) in lists.items() for column in columns}
    state = {key: value for key, value in s.items() if key not in columns_of}
    for name, (slots, columns) in lists.items():
        alive = s[f"{name}_alive"]
        table = torch.stack([s[f"{name}_{column}"].to(_INT) for column in columns], dim=2)
        target = torch.where(alive, alive.cumsum(dim=1) - 1, slots)  # the dead: a spare slot
        spare = torch.zeros(
            table.shape[0], slots + 1, len(columns), dtype=_INT, device=alive.device
        )
        state[name] = spare.scatter(1, target[:, :, None].expand_as(table), table)[:, :slots]
    return state


def append(
    s: dict[str, torch.Tensor], name: str, when: torch.Tensor, values: dict[str, torch.Tensor]
) -> None:
    """Append an entry (``values``: column -> ``[K]``) to list ``name`` of the rows ``when``.

    The list is packed, so its end is its first empty slot; a full list drops the entry
    (the caller's bounds say when that cannot happen).
    """
    alive = s[f"{name}_alive"]
    end = alive.sum(dim=1, keepdim=True)
    slot = (torch.arange(alive.shape[1], device=alive.device) == end) & when[:, None]
    s[f"{name}_alive"] = alive | slot
    for key, value in values.items():
        s[f"{name}_{key}"] = torch.where(slot, value[:, None], s[f"{name}_{key}"])


def first(mask: torch.Tensor) -> torch.Tensor:
    """The first True of each row of ``mask`` (bool ``[K, M]``): the lowest list index."""
    return mask & (mask.cumsum(dim=1) == 1)


def last(mask: torch.Tensor) -> torch.Tensor:
    """The last True of each row of ``mask`` (bool ``[K, M]``): the highest list index."""
    return mask & (mask.flip(1).cumsum(dim=1).flip(1) == 1)


def set_column(table: torch.Tensor, column: int, value: torch.Tensor) -> torch.Tensor:
    """``table`` (``[K, M]``) with column ``column`` replaced by ``value`` (a new tensor)."""
    return torch.cat((table[:, :column], value[:, None], table[:, column + 1 :]), dim=1)
