"""Errors of IMPALA training, in batchenv's error hierarchy (batchenv.errors)."""

from __future__ import annotations

from batchenv.errors import BatchEnvError, WorkerDiedError, WorkerTimeoutError

__all__ = ["ActorDiedError", "ActorTimeoutError", "TrainingStoppedError"]


class ActorDiedError(WorkerDiedError):
    """An actor process died (or raised) more often than the restart budget allows.

    Attributes (besides those of WorkerDiedError): ``worker`` is the actor index,
    ``env_description`` its env, ``exitcode`` its exit status (negative: the signal that
    killed it), ``restarts`` the restarts spent before this death.

    >>> error = ActorDiedError("actor 1 (env CartPole-v1) died", worker=1, exitcode=-9,
    ...                        env_description="CartPole-v1", restarts=3)
    >>> isinstance(error, WorkerDiedError), error.exitcode, error.restarts
    (True, -9, 3)
    """

    def __init__(self, message: str, *, restarts: int = 0, **kwargs):
        super().__init__(message, **kwargs)
        self.restarts = restarts


class ActorTimeoutError(WorkerTimeoutError):
    """An actor delivered no unroll within its deadline, more often than the restart budget."""


class TrainingStoppedError(BatchEnvError):
    """A trainer was used after it stopped (finished, failed or was interrupted)."""
