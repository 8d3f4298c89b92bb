"""Typed errors of batchenv.

Worker failures carry who failed (worker index, env index, env description), when (the
step count) and why (the remote exception, re-created with its original type where it
can be unpickled, with the remote traceback chained as its ``__cause__``).
"""

from __future__ import annotations


class BatchEnvError(Exception):
    """Base class of every batchenv error."""


class RemoteTraceback(Exception):
    """The traceback text of an exception raised in a worker process."""

    def __init__(self, text: str):
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return f"\n\n--- traceback in the worker process ---\n{self.text}"


class EnvWorkerError(BatchEnvError, RuntimeError):
    """An env in a worker process raised, or its worker died or hung.

    Attributes:
        worker: index of the worker process in its BatchEnv (0 for a lone ExternalProcess).
        env_index: index of the failing env in the batch, or None when not one env's fault.
        step: how many batch steps the BatchEnv had completed when it failed.
        env_description: a short description of the env's constructor.
        remote_type: the name of the remote exception type ("" for deaths and timeouts).
    """

    def __init__(
        self,
        message: str,
        *,
        worker: int | None = None,
        env_index: int | None = None,
        step: int | None = None,
        env_description: str = "",
        remote_type: str = "",
    ):
        super().__init__(message)
        self.worker = worker
        self.env_index = env_index
        self.step = step
        self.env_description = env_description
        self.remote_type = remote_type


class WorkerDiedError(EnvWorkerError):
    """A worker process exited or was killed. ``exitcode`` holds its exit status."""

    def __init__(self, message: str, *, exitcode: int | None = None, **kwargs):
        super().__init__(message, **kwargs)
        self.exitcode = exitcode


class WorkerTimeoutError(EnvWorkerError, TimeoutError):
    """A worker did not answer within the deadline. ``env_indices`` are the slow rows."""

    def __init__(self, message: str, *, env_indices: tuple[int, ...] = (), **kwargs):
        super().__init__(message, **kwargs)
        self.env_indices = env_indices


class ClosedError(BatchEnvError):
    """The env was closed, or broken by an earlier failure; create a new one."""


class AlreadyPendingCallError(BatchEnvError):
    """A call was made while another asynchronous call is still waiting for its result."""


class NoPendingCallError(BatchEnvError):
    """A wait was made with no asynchronous call pending."""


class NotResetError(BatchEnvError):
    """step() was called on an env that has not been reset since it was created."""
