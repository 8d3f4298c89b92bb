"""Typed errors of batchenv.

Worker failures carry who failed (worker index, env index, env description), when (the
step count) and why (the remote exception, re-created with its original type where it
can be unpickled, with the remote traceback chained as its ``__cause__``).

Where Gymnasium's vector envs raise an error of their own (``ClosedEnvironmentError``,
``AlreadyPendingCallError``, ``NoAsyncCallError``, ``multiprocessing.TimeoutError``), the
batchenv error that stands for it is also an instance of Gymnasium's, so code written
against ``gymnasium.vector`` keeps catching it.
"""

from __future__ import annotations

import multiprocessing

from gymnasium import error as gym_error


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


class WorkerTimeoutError(EnvWorkerError, TimeoutError, multiprocessing.TimeoutError):
    """A worker did not answer within the deadline. ``env_indices`` are the slow rows."""

    def __init__(self, message: str, *, env_indices: tuple[int, ...] = (), **kwargs):
        super().__init__(message, **kwargs)
        self.env_indices = env_indices


class ClosedError(BatchEnvError, gym_error.ClosedEnvironmentError):
    """The env was closed, or broken by an earlier failure; create a new one."""


class AlreadyPendingCallError(BatchEnvError, gym_error.AlreadyPendingCallError):
    """A call was made while another asynchronous call is still waiting for its result.
    ``name`` is the pending call ("step", "reset"), as in Gymnasium's error."""

    def __init__(self, message: str, name: str | None = None):
        Exception.__init__(self, message)
        self.name = name


class NoPendingCallError(BatchEnvError, gym_error.NoAsyncCallError):
    """A wait was made with no asynchronous call pending. ``name`` is the wait's call."""

    def __init__(self, message: str, name: str | None = None):
        Exception.__init__(self, message)
        self.name = name


class NotResetError(BatchEnvError):
    """step() was called on an env that has not been reset since it was created."""


class EnvIdsError(BatchEnvError, ValueError):
    """The env ids given to ``AsyncBatchEnv.send`` or the indices given to
    ``BatchEnv.reset`` cannot be used: repeated, none, or (``send``) left out before any
    ``recv()`` returned ids to reuse. A ValueError, as these misuses always raised."""


class EnvIdsOutOfRangeError(EnvIdsError, IndexError):
    """An env id or index outside ``[0, num_envs)``: also an IndexError, as before."""


class EnvIdsTypeError(EnvIdsError, TypeError):
    """Env ids that are not integers: also a TypeError, as before."""


class SpacesMismatchError(BatchEnvError, RuntimeError, ValueError):
    """The envs of a batch have different spaces where equal ones are needed: a
    RuntimeError, as Gymnasium's vector envs raise, and a ValueError, as batchenv did."""


class UnsupportedSpaceError(BatchEnvError, TypeError, ValueError):
    """A space batchenv cannot lay out in shared memory (Graph, Sequence, custom spaces).

    A TypeError, as Gymnasium's shared-memory error for spaces of dynamic shape, and a
    ValueError, as ``AsyncVectorEnv(shared_memory=True)``'s for custom spaces."""


_WITH_ENV_TYPE: dict[type, type] = {}


def with_env_type(error: BaseException) -> BaseException:
    """An :class:`EnvWorkerError` that is also an instance of the env's own exception type
    (its ``__cause__``), so ``except ValueError`` catches an env's ValueError as with
    Gymnasium's vector envs; ``error`` itself when there is no such type to add (the
    remote exception could not be re-created: only its traceback text came back), or when
    the type cannot be combined (an OSError, say)."""
    cause = error.__cause__
    if (
        type(error) is not EnvWorkerError
        or not isinstance(cause, Exception)
        or isinstance(cause, (BatchEnvError, RemoteTraceback))
    ):
        return error
    kind = type(cause)
    combined = _WITH_ENV_TYPE.get(kind)
    if combined is None:
        try:
            combined = type(f"EnvWorkerError[{kind.__name__}]", (EnvWorkerError, kind), {})
        except TypeError:
            return error
        _WITH_ENV_TYPE[kind] = combined
    typed = combined(
        str(error),
        worker=error.worker,
        env_index=error.env_index,
        step=error.step,
        env_description=error.env_description,
        remote_type=error.remote_type,
    )
    typed.__cause__ = cause
    return typed.with_traceback(error.__traceback__)
