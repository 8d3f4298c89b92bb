"""ExternalProcess: an environment (or a group of them) living in a worker process.

    >>> import functools, gymnasium
    >>> env = ExternalProcess(functools.partial(gymnasium.make, "CartPole-v1"))
    >>> observ, info = env.reset(seed=0)
    >>> promise = env.step(0, blocking=False)   # returns at once
    >>> observ, reward, terminated, truncated, info = promise()
    >>> env.close()

The constructor is sent with cloudpickle, so lambdas and closures work. Every wait has a
deadline and notices a dead worker at once; failures raise the typed errors of
``batchenv.errors`` with the remote exception and traceback chained.
"""

from __future__ import annotations

import collections
import functools
import os
import pickle
import sys
import time
import weakref
from collections.abc import Callable, Sequence
from multiprocessing.reduction import send_handle
from typing import Any

import cloudpickle
import numpy as np

from batchenv.errors import (
    AlreadyPendingCallError,
    ClosedError,
    EnvWorkerError,
    NoPendingCallError,
    SpacesMismatchError,
    WorkerDiedError,
    WorkerTimeoutError,
    with_env_type,
)
from batchenv.workers.launch import WorkerProcess, start_worker
from batchenv.workers.protocol import (
    Readable,
    read_message,
    remote_cause,
    spin_wait,
    write_message,
)
from batchenv.workers.transport import check_same_spaces

DEFAULT_START_TIMEOUT = 120.0
DEFAULT_CLOSE_TIMEOUT = 5.0


def describe_constructor(constructor: Callable) -> str:
    """A short human description of an env constructor, for error messages."""
    if isinstance(constructor, functools.partial):
        func = getattr(constructor.func, "__qualname__", repr(constructor.func))
        module = getattr(constructor.func, "__module__", "") or ""
        args = [repr(a) for a in constructor.args] + [
            f"{k}={v!r}" for k, v in constructor.keywords.items()
        ]
        name = f"{module}.{func}" if module and module != "builtins" else func
        return f"{name}({', '.join(args)})"
    text = getattr(constructor, "__qualname__", None) or repr(constructor)
    module = getattr(constructor, "__module__", None)
    if module and module not in ("__main__", "builtins") and "<lambda>" not in text:
        text = f"{module}.{text}"
    return text if len(text) <= 80 else text[:77] + "..."


def remaining(deadline: float | None) -> float | None:
    """Seconds left until ``deadline`` (a ``time.monotonic()`` value; None: no deadline)."""
    return None if deadline is None else max(0.0, deadline - time.monotonic())


class ExternalProcess:
    """One env, or a group of envs, stepped in a child process.

    Args:
        constructor: a callable returning a Gymnasium (or legacy Gym) env, or a sequence
            of them to host several envs in one worker (then pass ``index=`` to pick one).
        start_method: "forkserver" (default; fast) or "spawn" (a fresh interpreter).
        start_timeout: seconds allowed for starting the worker and building the envs.
        timeout: default deadline in seconds for each call (None: no deadline; a dead
            worker is still noticed at once).
        worker_index: how errors name this worker inside a BatchEnv.
        rows: how errors name its envs (their batch rows).
        wait: wait until the envs are built (False: call :meth:`wait_started` later).
        exact_spaces: the envs must have equal spaces (False: spaces of one shared-memory
            layout, see ``batchenv.workers.transport.check_same_spaces``).
        spin_us: after sending a step, poll for the reply for up to this many microseconds
            before sleeping, and let the worker poll for the next step as long after
            replying (both yield the core between polls). Saves the cross-core wake-ups that
            dominate short steps; 0 always sleeps.
    """

    def __init__(
        self,
        constructor: Callable | Sequence[Callable],
        *,
        start_method: str = "forkserver",
        start_timeout: float = DEFAULT_START_TIMEOUT,
        timeout: float | None = None,
        worker_index: int = 0,
        rows: Sequence[int] | None = None,
        wait: bool = True,
        spin_us: float = 0.0,
        exact_spaces: bool = True,
    ):
        constructors = (
            list(constructor) if isinstance(constructor, (list, tuple)) else [constructor]
        )
        if not constructors:
            raise ValueError("ExternalProcess needs at least one env constructor")
        for item in constructors:
            if not callable(item):
                raise TypeError(f"env constructor must be callable, got {item!r}")
        try:
            payload = cloudpickle.dumps(constructors)
        except Exception as error:
            raise TypeError(
                f"env constructor {describe_constructor(constructors[0])} cannot be pickled "
                f"for the worker process ({type(error).__name__}: {error}); pass a function, "
                "lambda or functools.partial that builds the env inside the worker"
            ) from error
        self.rows = list(rows) if rows is not None else list(range(len(constructors)))
        self._worker_rows = list(self.rows)  # the labels the worker uses in its replies
        self.worker_index = worker_index
        self.description = describe_constructor(constructors[0])
        self.timeout = timeout
        self.exact_spaces = exact_spaces
        if not spin_us >= 0.0:
            raise ValueError(f"spin_us must be >= 0, got {spin_us!r}")
        self.spin = spin_us * 1e-6
        self.steps = 0
        self._pending: collections.deque[str] = collections.deque()  # requests in flight
        self._closed = False
        self._broken: BaseException | None = None
        self._process: WorkerProcess = start_worker(start_method)
        self._finalizer = weakref.finalize(self, _reap, self._process)
        self._conn = self._process.conn
        self._readable = Readable(self._conn)
        self._fd = self._conn.fileno()
        init = {
            "sys_path": list(sys.path),
            "cwd": os.getcwd(),
            "rows": self.rows,
            "watch_pid": os.getpid(),
            "constructors": payload,
            "spin_seconds": self.spin,
        }
        self._start_timeout = start_timeout
        try:
            self._conn.send_bytes(pickle.dumps(init))
        except BaseException:
            self.terminate()
            raise
        if wait:
            self.wait_started(start_timeout)

    def wait_started(self, timeout: float) -> None:
        """Wait until the worker has built its envs (construction with ``wait=False``)."""
        try:
            spaces = self._receive(time.monotonic() + timeout, "start")
        except EnvWorkerError as error:  # a constructor raised: also of its own type
            self.terminate()
            typed = with_env_type(error)
            if typed is error:
                raise
            raise typed from typed.__cause__
        except BaseException:
            self.terminate()
            raise
        self._spaces = spaces
        self.observation_space, self.action_space = spaces[0]
        try:
            names = [f"env {row}" for row in self.rows]
            check_same_spaces(spaces, names=names, exact=self.exact_spaces)
        except SpacesMismatchError:
            self.terminate()
            raise

    # ------------------------------------------------------------------ the Gymnasium API

    def reset(
        self,
        seed: int | None = None,
        options: dict | None = None,
        *,
        blocking: bool = True,
        index: int = 0,
    ):
        """Reset the env; returns ``(observ, info)``, or a promise when not blocking."""
        return self.call_at(
            index, "reset", (), {"seed": seed, "options": options}, blocking=blocking
        )

    def step(self, action: Any, *, blocking: bool = True, index: int = 0):
        """Step the env; returns the 5-tuple, or a promise when not blocking."""
        promise = self.call_at(index, "step", (action,), {}, blocking=False)
        promise.on_result = self._count_step
        return promise() if blocking else promise

    def _count_step(self) -> None:
        self.steps += 1

    def render(self, *, index: int = 0):
        return self.call_at(index, "render", (), {})

    def call(self, name: str, *args, **kwargs):
        """Call method ``name`` of the (first) env in the worker and return its result."""
        return self.call_at(0, name, args, kwargs)

    def get_attr(self, name: str, *, index: int = 0):
        """Read attribute ``name`` of the env (looked up through its wrappers)."""
        return self._roundtrip(("getattr", index, name), f"get_attr({name!r})")

    def set_attr(self, name: str, value: Any, *, index: int = 0) -> None:
        self._roundtrip(("setattr", index, name, value), f"set_attr({name!r})")

    def call_at(self, index: int, name: str, args: tuple, kwargs: dict, *, blocking: bool = True):
        """Call ``env.name(*args, **kwargs)`` on env ``index`` of this worker."""
        if not 0 <= index < len(self.rows):
            raise IndexError(f"this worker hosts {len(self.rows)} envs, got index {index}")
        self.send(("call", index, name, args, kwargs), name)
        promise = _Promise(self, name)
        return promise() if blocking else promise

    # ------------------------------------------------------------------ the wire

    def send(
        self, request: tuple | bytes, what: str, *, step: int | None = None, pipeline: bool = False
    ) -> None:
        """Send a request; its reply must be collected with :meth:`wait` before the next
        request, unless ``pipeline``: then replies are collected in the order sent."""
        self._check_usable(what)
        if self._pending and not pipeline:
            raise AlreadyPendingCallError(
                f"{what} called while {self._pending[0]} is still pending on worker "
                f"{self.worker_index}; wait for its result first"
            )
        try:
            if type(request) is bytes:  # the one-byte step messages: framed by hand
                write_message(self._fd, request)
            else:
                self._conn.send_bytes(pickle.dumps(request))
        except OSError as error:
            self._fail(self._died(what, step), error)
        self._pending.append(what)

    def wait(self, timeout: float | None = None, *, step: int | None = None):
        """Collect the reply of the pending request (``b""`` for an empty fast reply)."""
        if not self._pending or self._closed:  # a closed worker's fd may be reused
            self._check_usable("wait")
            raise NoPendingCallError(f"no call is pending on worker {self.worker_index}")
        timeout = self.timeout if timeout is None else timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        return self._receive(deadline, self._pending.popleft(), step=step)

    @property
    def in_flight(self) -> int:
        """Requests sent whose replies are not collected yet."""
        return len(self._pending)

    def reply_ready(self) -> bool:
        """True when a reply (or the worker's death) can be read without waiting."""
        try:
            return self._readable(0)
        except (OSError, ValueError):
            return True

    def fileno(self) -> int:
        """The connection's file descriptor, to wait on several workers at once."""
        return self._fd

    def send_fd(self, fd: int) -> None:
        """Pass file descriptor ``fd`` to the worker (after a request that expects one)."""
        send_handle(self._conn, fd, self.pid)

    def label(self, worker_index: int, rows: Sequence[int]) -> None:
        """How errors name this worker and its envs from now on (its place in a batch)."""
        self.worker_index, self.rows = worker_index, list(rows)

    def _roundtrip(self, request: tuple, what: str):
        self.send(request, what)
        return self.wait()

    def _receive(self, deadline: float | None, what: str, *, step=None):
        """``step`` names when a failure happened: an int, or one step count per batch row
        (an asynchronous batch, where every env has its own), or None for ``self.steps``."""
        steps_by_row = None if step is None or isinstance(step, (int, np.integer)) else step
        step = self.steps if step is None else self._step_of(step, None)
        try:
            ready = spin_wait(self._readable, self.spin) or self._readable(remaining(deadline))
        except BaseException:  # KeyboardInterrupt while waiting: stop the worker, re-raise
            self.terminate()
            raise
        if not ready:
            error = WorkerTimeoutError(
                f"worker {self.worker_index} ({self.description}, envs {self.rows}) did not "
                f"answer {what} within its deadline at step {step}; the worker was terminated",
                worker=self.worker_index,
                env_index=self.rows[0] if len(self.rows) == 1 else None,
                env_indices=tuple(self.rows),
                step=step,
                env_description=self.description,
            )
            self._fail(error, None)
        try:
            message = read_message(self._fd)
        except (EOFError, OSError) as cause:
            self._fail(self._died(what, step), cause)
        if not message:
            return b""
        status, *rest = pickle.loads(message)
        if status == "ok":
            return rest[0]
        self._fail(*self._remote_error(what, step if steps_by_row is None else steps_by_row, *rest))

    def _step_of(self, step, env_index: int | None) -> int:
        """The step to name: ``step``, or the count of ``env_index`` (else of this worker's
        first env) when ``step`` holds one count per batch row."""
        if isinstance(step, (int, np.integer)):
            return int(step)
        return int(step[self.rows[0] if env_index is None else env_index])

    def _remote_error(self, what, step, env_index, payload, type_name, message, text):
        if env_index in self._worker_rows:  # the batch may have renamed our rows since
            env_index = self.rows[self._worker_rows.index(env_index)]
        step = self._step_of(step, env_index)
        remote = remote_cause(payload, text)
        where = f"env {env_index}" if env_index is not None else f"envs {self.rows}"
        when = "while being built" if what == "start" else f"in {what} at step {step}"
        error = EnvWorkerError(
            f"worker {self.worker_index} ({self.description}, {where}) raised {type_name} "
            f"{when}: {message}",
            worker=self.worker_index,
            env_index=env_index,
            step=step,
            env_description=self.description,
            remote_type=type_name,
        )
        return error, remote

    def _died(self, what: str, step: int | None) -> WorkerDiedError:
        code = self._process.exitcode(wait=1.0)
        if code is None:
            how = "exit status unknown"
        elif code >= 0:
            how = f"exit code {code}"
        else:
            how = f"killed by signal {-code}"
        return WorkerDiedError(
            f"worker {self.worker_index} ({self.description}, envs {self.rows}) died during "
            f"{what} at step {self.steps if step is None else step} ({how})",
            worker=self.worker_index,
            env_index=self.rows[0] if len(self.rows) == 1 else None,
            step=self.steps if step is None else step,
            env_description=self.description,
            exitcode=code,
        )

    def _fail(self, error: BaseException, cause: BaseException | None):
        self._broken = error
        self.terminate()
        raise error from cause

    def _check_usable(self, what: str) -> None:
        if self._broken is not None:
            raise ClosedError(
                f"worker {self.worker_index} ({self.description}) is unusable since: "
                f"{self._broken}; create a new env"
            ) from self._broken
        if self._closed:
            raise ClosedError(f"{what} called on a closed ExternalProcess ({self.description})")

    # ------------------------------------------------------------------ shutdown

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def pid(self) -> int:
        return self._process.pid

    def close(self, timeout: float = DEFAULT_CLOSE_TIMEOUT) -> list[str]:
        """Close the envs (``env.close()`` in the worker) and end the worker.

        Returns within about ``timeout`` seconds even when an env's close hangs (the worker
        is then killed). A pending call's result is discarded. Closing twice is a no-op.
        Returns the problems reported by the envs' close methods.
        """
        if self._closed:
            return []
        self._closed = True
        problems: list[str] = []
        if self._broken is None and self._process.exitcode() is None:
            deadline = time.monotonic() + timeout
            try:
                while self._pending:  # the worker answers the pending calls first
                    self._pending.popleft()
                    if self._conn.poll(remaining(deadline)):
                        self._conn.recv_bytes()
                self._conn.send_bytes(pickle.dumps(("close",)))
                if self._conn.poll(remaining(deadline)):
                    message = self._conn.recv_bytes()
                    if message:
                        problems = pickle.loads(message)[1] or []
                else:
                    problems = [f"env close did not finish within {timeout} s; worker killed"]
            except (EOFError, OSError):
                pass
            self._process.join(remaining(deadline) or 0.0)
        self.terminate()
        return problems

    def terminate(self) -> None:
        """Kill the worker at once (no env.close()) and reap it."""
        self._closed = True
        self._finalizer()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"ExternalProcess({self.description}, envs={self.rows}, pid={self.pid}, {state})"


def _reap(process: WorkerProcess) -> None:
    """Finalizer: end the worker. A graceful EOF first, then SIGKILL."""
    try:
        process.conn.close()
    except OSError:
        pass
    if not process.join(0.05):
        process.kill()
        process.join(2.0)


class _Promise:
    """A callable that waits for the pending reply of an ExternalProcess (once)."""

    def __init__(self, owner: ExternalProcess, what: str):
        self._owner = owner
        self._what = what
        self._used = False

    on_result = None

    def ready(self) -> bool:
        """True when the reply can be collected without waiting."""
        return self._owner.reply_ready()

    def __call__(self, timeout: float | None = None, *, step: int | None = None):
        if self._used:
            raise NoPendingCallError(f"the result of {self._what} was already collected")
        self._used = True
        result = self._owner.wait(timeout, step=step)
        if self.on_result is not None:
            self.on_result()
        return result
