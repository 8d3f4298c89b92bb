"""The shared memory block of a batch: one memfd mapped by the parent and every worker.

It holds, for every row of the batch: the observation leaves, the observation leaves of an
episode reset ahead, the action leaves, the reward, the two flags and the per-row command
byte. The parent lays it out and creates it (:func:`allocate`); a worker maps the file
handle it is passed (:func:`attach`); both get the same named NumPy views.
"""

from __future__ import annotations

import mmap
import os

import numpy as np

from batchenv import spaces as batch_spaces

Layout = list[tuple[str, int, tuple, str]]  # (name, byte offset, shape, dtype string)


class Buffers:
    """Named views of the block: ``observ``, ``ahead`` and ``action`` (one array per leaf
    of the space), ``reward``, ``terminated``, ``truncated`` and ``command``."""

    def __init__(self, block: mmap.mmap, layout: Layout, observation_space, action_space):
        self.block = block
        arrays = {}
        for name, offset, shape, dtype in layout:
            count = int(np.prod(shape, dtype=np.int64))
            arrays[name] = np.frombuffer(block, np.dtype(dtype), count, offset).reshape(shape)
        n_obs = len(batch_spaces.leaves(observation_space))
        n_act = len(batch_spaces.leaves(action_space))
        self.observ = [arrays[f"observ{i}"] for i in range(n_obs)]
        self.ahead = [arrays[f"ahead{i}"] for i in range(n_obs)]
        self.action = [arrays[f"action{i}"] for i in range(n_act)]
        self.reward = arrays["reward"]
        self.terminated = arrays["terminated"]
        self.truncated = arrays["truncated"]
        self.command = arrays["command"]


def allocate(observation_space, action_space, num_envs: int) -> tuple[Buffers, Layout, int, int]:
    """Lay out the block for ``num_envs`` rows, create it as a memfd and map it.

    Returns ``(buffers, layout, size, fd)``; the caller passes ``fd`` to the workers and
    closes it.
    """
    fields: list[tuple[str, tuple, np.dtype]] = []
    for prefix, space in (("observ", observation_space), ("ahead", observation_space)):
        for i, leaf in enumerate(batch_spaces.leaves(space)):
            shape, dtype = batch_spaces.leaf_layout(leaf)
            fields.append((f"{prefix}{i}", (num_envs, *shape), dtype))
    for i, leaf in enumerate(batch_spaces.leaves(action_space)):
        shape, dtype = batch_spaces.leaf_layout(leaf)
        fields.append((f"action{i}", (num_envs, *shape), dtype))
    fields += [
        ("reward", (num_envs,), np.dtype(np.float64)),
        ("terminated", (num_envs,), np.dtype(np.bool_)),
        ("truncated", (num_envs,), np.dtype(np.bool_)),
        ("command", (num_envs,), np.dtype(np.uint8)),
    ]
    layout, offset = [], 0
    for name, shape, dtype in fields:
        offset = (offset + 63) // 64 * 64
        layout.append((name, offset, shape, dtype.str))
        offset += int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    size = max(offset, 1)
    fd = _anonymous_file(size)
    buffers = Buffers(mmap.mmap(fd, size), layout, observation_space, action_space)
    return buffers, layout, size, fd


def attach(fd: int, size: int, layout: Layout, observation_space, action_space) -> Buffers:
    """Map the block a worker was passed as ``fd`` (which is closed)."""
    block = mmap.mmap(fd, size)
    os.close(fd)
    return Buffers(block, layout, observation_space, action_space)


def _anonymous_file(size: int) -> int:
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("batchenv", os.MFD_CLOEXEC)
    else:  # pragma: no cover - non-Linux
        import tempfile

        handle, path = tempfile.mkstemp(prefix="batchenv-")
        os.unlink(path)
        fd = handle
    os.ftruncate(fd, size)
    return fd
