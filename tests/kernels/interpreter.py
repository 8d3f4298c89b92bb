"""Import batchenv's kernel modules the way this machine can run them (see
tests/kernels/conftest.py): with ``TRITON_INTERPRET=1`` set while they are defined when there
is no CUDA, then the environment put back. The root conftest calls this before any test
module is collected, because any module that imports ``batchenv.kernels`` first (the
algorithm tests do) would define the kernels in compiled mode, and every kernel test would
then skip.
"""

from __future__ import annotations

import importlib
import os

import torch

KERNEL_MODULES = (
    "_triton",
    "_classic",
    "_tag",
    "cartpole",
    "pendulum",
    "mountain_car",
    "acrobot",
    "sampler",
    "tag_discrete",
    "tag_continuous",
    "minatar",  # its _kernel and the games' device functions
)


def import_kernels_for_this_machine() -> None:
    use_interpreter = not torch.cuda.is_available()
    previous = os.environ.get("TRITON_INTERPRET")
    if use_interpreter:
        os.environ["TRITON_INTERPRET"] = "1"
    try:
        for name in KERNEL_MODULES:
            importlib.import_module(f"batchenv.kernels.{name}")
    finally:
        if previous is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = previous
