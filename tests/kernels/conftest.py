"""Where the kernel tests run batchenv's Triton kernels.

With CUDA, the kernels are compiled and run on the GPU. Without it they run in Triton's
interpreter, and Triton decides that when a ``@triton.jit`` function is *defined*: so this
conftest, which pytest loads before the test modules of this folder, imports batchenv's
kernel modules with ``TRITON_INTERPRET=1`` set, then puts the environment back as it was.
The variable does not stay on for the rest of the suite: torch's inductor reads it too, and
``tests/kernels/test_classic_control.py`` expects the triton backend to be unavailable on a
plain CPU process. A test that launches kernels takes the :func:`triton_device` fixture,
which switches the interpreter on for that test only (``batchenv.kernels`` checks the variable
before every CPU launch) or skips with the reason the kernels cannot run.

The kernels call only Triton builtins (see ``batchenv/kernels/_triton.py``), so this works
even when ``triton`` itself was imported earlier in the session without the interpreter.
"""

from __future__ import annotations

import pytest
import torch

from tests.kernels.interpreter import import_kernels_for_this_machine

import_kernels_for_this_machine()


@pytest.fixture
def triton_device(monkeypatch) -> torch.device:
    """The device the Triton kernels run on here (the interpreter is on for the test), or a
    skip saying why they cannot run."""
    from batchenv.kernels import _triton
    from batchenv.kernels.cartpole import _step_kernel

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu" and _triton.kernel_mode(_step_kernel) == "interpreted":
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    reason = _triton.unavailable_reason(_step_kernel, device)
    if reason is not None:
        pytest.skip(f"batchenv's Triton kernels cannot run on {device}: {reason}")
    return device
