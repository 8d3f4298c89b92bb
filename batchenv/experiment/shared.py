"""Hogwild! parameters: one set of networks in shared memory, trained by every session of a
trial at once (SLM Lab's ``meta.distributed: shared``; Recht et al. 2011, "Hogwild!: A
Lock-Free Approach to Parallelizing Stochastic Gradient Descent").

The trial driver makes one folder per trial (:meth:`SharedParameters.create`, in /dev/shm
when this machine has it); every session process of the trial then calls
:meth:`SharedParameters.attach` with the networks it built. The first session to attach
writes its freshly built (or, when resuming, checkpointed) parameters into the folder's
``parameters.bin``; every session, the first included, then swaps each parameter's data
for a view of that file, mapped with ``torch.from_file(..., shared=True)``. From then on an
optimiser step of any session writes the one copy every session reads: no locks, no
gradient pushes, each session with its own envs, optimiser state, replay memory and target
networks (SLM Lab shares only the networks that have an optimiser). The driver removes the
folder when the trial ends.

    >>> import torch
    >>> shared = SharedParameters.create("t0")
    >>> net = torch.nn.Linear(4, 2)
    >>> shared.attach({"q": net})            # the first to attach writes its values
    True
    >>> other = torch.nn.Linear(4, 2)
    >>> shared.attach({"q": other})          # the others adopt them
    False
    >>> bool((other.weight == net.weight).all())
    True
    >>> shared.remove()
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import nn

__all__ = ["SharedParameters", "SharedParametersError"]

LAYOUT_NAME = "layout.json"
DATA_NAME = "parameters.bin"
_LOCK_NAME = "lock"
#: Seconds a session waits for another session that is writing the first parameters.
LOCK_TIMEOUT = 60.0


class SharedParametersError(RuntimeError):
    """A session's networks do not match the shared ones, or the shared folder is gone."""


@dataclass(frozen=True)
class SharedParameters:
    """The shared-memory folder of one trial's networks (picklable: only its path).

    Args:
        path: the folder :meth:`create` made.
    """

    path: str

    @classmethod
    def create(cls, label: str, root: str | os.PathLike | None = None) -> SharedParameters:
        """A new, empty folder for one trial, named ``batchenv-hogwild-{label}-{pid}-*`` under
        ``root`` (default: /dev/shm, else the temporary directory)."""
        folder = tempfile.mkdtemp(
            prefix=f"batchenv-hogwild-{label}-{os.getpid()}-", dir=root or _memory_root()
        )
        return cls(folder)

    def attach(self, modules: Mapping[str, nn.Module]) -> bool:
        """Make every parameter of ``modules`` a view of the shared memory.

        The first call on the folder (over all processes) writes the parameters' current
        values there and returns True; later calls check that their networks have the same
        names and shapes (:class:`SharedParametersError` otherwise), adopt the shared
        values and return False. Parameters must be float32 on the CPU (ValueError).
        """
        import torch

        parameters = {
            f"{name}.{key}": parameter
            for name, module in modules.items()
            for key, parameter in module.named_parameters()
        }
        for name, parameter in parameters.items():
            if parameter.device.type != "cpu" or parameter.dtype != torch.float32:
                raise ValueError(
                    f"shared parameters must be float32 on the CPU, but {name} is "
                    f"{parameter.dtype} on {parameter.device}; set config.device: cpu"
                )
        layout = [[name, list(parameter.shape)] for name, parameter in parameters.items()]
        total = sum(parameter.numel() for parameter in parameters.values())
        folder = Path(self.path)
        if not folder.is_dir():
            raise SharedParametersError(
                f"the shared parameters {folder} are gone: the trial that made them has ended"
            )
        with _locked(folder / _LOCK_NAME):
            first = not (folder / LAYOUT_NAME).exists()
            if not first:
                stored = json.loads((folder / LAYOUT_NAME).read_text())
                if stored != layout:
                    raise SharedParametersError(
                        f"this session's networks ({_describe(layout)}) differ from the "
                        f"shared ones in {folder} ({_describe(stored)}); every session of a "
                        "shared trial must build the same networks"
                    )
            else:
                _check_space(folder, total * 4)
            flat = torch.from_file(
                str(folder / DATA_NAME), shared=True, size=total, dtype=torch.float32
            )
            offset = 0
            for parameter in parameters.values():
                view = flat[offset : offset + parameter.numel()].view(parameter.shape)
                offset += parameter.numel()
                if first:
                    view.copy_(parameter.detach())
                parameter.data = view
            if first:  # last, so that a layout file always means the values are in place
                partial = folder / f"{LAYOUT_NAME}.partial"
                partial.write_text(json.dumps(layout))
                partial.replace(folder / LAYOUT_NAME)
        return first

    def remove(self) -> None:
        """Delete the folder (sessions still attached keep their mapping until they end)."""
        shutil.rmtree(self.path, ignore_errors=True)


# --- helpers --------------------------------------------------------------------------------


def _memory_root() -> str:
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        return str(shm)
    return tempfile.gettempdir()


class _locked:
    """An exclusive flock on ``path`` taken within :data:`LOCK_TIMEOUT` seconds."""

    def __init__(self, path: Path):
        self.path = path

    def __enter__(self) -> None:
        self.file = open(self.path, "a+")
        deadline = time.monotonic() + LOCK_TIMEOUT
        while True:
            try:
                fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    self.file.close()
                    raise TimeoutError(
                        f"another session held the shared parameters' lock {self.path} for "
                        f"over {LOCK_TIMEOUT:g} s; is a session of the trial stuck?"
                    ) from None
                time.sleep(0.01)

    def __exit__(self, *exc_info) -> None:
        fcntl.flock(self.file, fcntl.LOCK_UN)
        self.file.close()


def _check_space(folder: Path, size: int) -> None:
    """OSError unless ``folder``'s file system has ``size`` bytes free (a full tmpfs would
    kill a session with SIGBUS at its first write instead)."""
    stats = os.statvfs(folder)
    free = stats.f_bavail * stats.f_frsize
    if free < size:
        raise OSError(
            f"{folder} has {free:,} bytes free but the shared parameters need {size:,}; free "
            "space there (e.g. a larger /dev/shm) or use meta.distributed: false"
        )


def _describe(layout: list) -> str:
    count = sum(_product(shape) for _, shape in layout)
    return f"{len(layout)} tensors, {count:,} values"


def _product(shape: list[int]) -> int:
    result = 1
    for size in shape:
        result *= size
    return result
