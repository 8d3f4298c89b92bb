"""What the parent and a worker process say to each other, and how it is framed.

Messages travel over one socket ``Connection`` in ``Connection.send_bytes`` frames (a
4-byte length first):

- a pickled request tuple ``(command, ...)`` -> a pickled ``("ok", result)`` or an error
  reply ``("error", env_index, exception_bytes, type_name, message, traceback_text)``;
- the single byte :data:`GO` (shared-memory mode): run the per-row commands written in the
  shared ``command`` array for the worker's rows, write the results into shared memory and
  reply ``b""`` (or a pickled ``("ok", infos)`` when some info dict is non-empty);
- :data:`STEP_ALL` / :data:`STEP_ALL_AHEAD`: every row of the worker steps (as STEP /
  STEP_AHEAD), the command array unread; replies as for GO;
- :data:`ROWS` followed by int32 row numbers: run the commands of just those rows; replies
  as for GO. Such messages may be pipelined (several in flight, answered in order), which
  the asynchronous ``send``/``recv`` API needs.

The per-row commands (:data:`STEP`, :data:`RESET`, :data:`SAME_STEP`, :data:`STEP_AHEAD`)
are described in :mod:`batchenv.workers.autoreset`.
"""

from __future__ import annotations

import copyreg
import functools
import io
import math
import os
import pickle
import select
import struct
import time
import traceback
from multiprocessing.connection import Connection

import numpy as np

from batchenv.errors import RemoteTraceback

IDLE, STEP, RESET, SAME_STEP, STEP_AHEAD = 0, 1, 2, 3, 4
GO = b"G"
STEP_ALL, STEP_ALL_AHEAD = b"S", b"A"
ROWS = b"R"

_LENGTH = struct.Struct("!i")  # the frame header of Connection.send_bytes


def rows_message(rows: np.ndarray) -> bytes:
    """The :data:`ROWS` message asking a worker to run the commands of ``rows``."""
    return ROWS + np.asarray(rows, np.int32).tobytes()


def rows_of_message(message: bytes) -> np.ndarray:
    return np.frombuffer(message, np.int32, offset=1).astype(np.int64)


def write_message(fd: int, payload: bytes) -> None:
    """Send ``payload`` on ``fd`` framed as ``Connection.send_bytes`` frames it
    (a 4-byte length first), in one write when the socket takes it whole."""
    data = _LENGTH.pack(len(payload)) + payload
    sent = os.write(fd, data)
    while sent < len(data):
        sent += os.write(fd, data[sent:])


def read_message(fd: int) -> bytes:
    """One message sent by ``Connection.send_bytes``, read straight from the blocking ``fd``.

    The bytes ``Connection.recv_bytes()`` returns, without its Python layers (a BytesIO per
    read), which the step loop paid twice per worker per step on each side. It reads
    exactly one message and never past it: a passed file handle may follow on the socket.
    Raises EOFError when the peer is gone.
    """
    (size,) = _LENGTH.unpack(_read_exactly(fd, 4))
    if size == -1:  # Connection's frame of a message over 2 GiB
        (size,) = struct.unpack("!Q", _read_exactly(fd, 8))
    return _read_exactly(fd, size) if size else b""


def _read_exactly(fd: int, size: int) -> bytes:
    data = os.read(fd, size)
    if len(data) == size:
        return data
    parts, remaining = [data], size - len(data)
    while remaining:
        if not data:
            raise EOFError("the other end of the connection is gone")
        data = os.read(fd, remaining)
        parts.append(data)
        remaining -= len(data)
    return b"".join(parts)


class Readable:
    """``readable(timeout)``: wait up to ``timeout`` seconds (None: forever) until ``conn``
    has a message (or was closed); True when it has.

    One ``select.poll`` object serves the connection's whole life. ``Connection.poll()``
    builds and registers a new selector on every call (~15 us on the 2-core VM), which
    the step loop paid once per worker in the parent and once in each worker.
    """

    def __init__(self, conn: Connection):
        self._poll = select.poll()
        self._poll.register(conn.fileno(), select.POLLIN)

    def __call__(self, timeout: float | None) -> bool:
        ms = -1 if timeout is None else max(0, math.ceil(timeout * 1000))
        return bool(self._poll.poll(ms))


def spin_wait(readable: Readable, seconds: float) -> bool:
    """Poll without sleeping for up to ``seconds``; True once a message is there.

    Each miss yields the core (``sched_yield``), so the spin only uses a core that nobody
    else wants. It saves the wake-up from a blocking wait, which costs a cross-core
    interrupt: ~100 us on virtual machines, more than a CartPole step of 32 envs.
    """
    if seconds <= 0.0 or readable(0):
        return seconds > 0.0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        os.sched_yield()
        if readable(0):
            return True
    return False


class EnvFailure(Exception):
    """Raised inside an env group: env ``row`` failed with ``error``."""

    def __init__(self, row: int | None, error: BaseException):
        super().__init__(row, error)
        self.row = row
        self.error = error


def remote_cause(payload: bytes | None, text: str) -> BaseException:
    """The remote exception of an error reply, re-created from ``payload`` where it can be
    unpickled (its remote traceback chained under it), else the traceback text itself."""
    remote = None
    if payload:
        try:
            remote = pickle.loads(payload)
        except Exception:
            remote = None
    if remote is None:
        return RemoteTraceback(text)
    remote.__cause__ = RemoteTraceback(text)
    return remote


def error_reply(env_index: int | None, error: BaseException) -> bytes:
    """Pickle an exception with its type and traceback, even when it cannot be pickled."""
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    try:
        payload = pickle.dumps(error)
        pickle.loads(payload)
    except Exception:
        payload = b""
    return pickle.dumps(("error", env_index, payload, type(error).__name__, str(error), text))


def ok_reply(result, row: int | None) -> bytes:
    """Pickle a result; what plain pickle cannot carry (a lambda in a wrapper, a local
    class) goes by cloudpickle, as env constructors do."""
    try:
        return pickle.dumps(("ok", result))
    except Exception as error:
        try:
            import cloudpickle

            return cloudpickle.dumps(("ok", result))
        except Exception:  # an unpicklable reply is the env's fault; say so
            wrapped = TypeError(f"the worker's reply could not be pickled: {error}")
            return error_reply(row, wrapped)


# NumPy scalars pickled by value: ``np.float64(x)`` becomes ``(np.float64, (float(x),))``,
# which loads as the same type and value. NumPy's own reduction pickles the dtype and
# the raw bytes of every scalar: ~1.3 us each, and MuJoCo envs return four of them in the
# info of every step (43 us per step for 8 HalfCheetahs, against 11 us this way).
_SCALARS_BY_VALUE = copyreg.dispatch_table.copy()
for _type, _convert in [
    (np.float64, float),
    (np.float32, float),
    (np.float16, float),
    (np.int64, int),
    (np.int32, int),
    (np.bool_, bool),
]:
    _SCALARS_BY_VALUE[_type] = functools.partial(
        lambda scalar_type, convert, value: (scalar_type, (convert(value),)), _type, _convert
    )


def infos_reply(infos: dict) -> bytes:
    """Pickle the per-row infos; when one cannot be pickled even by cloudpickle, blame
    its row."""
    try:
        buffer = io.BytesIO()
        pickler = pickle.Pickler(buffer, pickle.HIGHEST_PROTOCOL)
        pickler.dispatch_table = _SCALARS_BY_VALUE
        pickler.dump(("ok", infos))
        return buffer.getvalue()
    except Exception:
        import cloudpickle

        for row, info in infos.items():
            try:
                cloudpickle.dumps(info)
            except Exception as error:
                wrapped = TypeError(f"the info returned by env {row} could not be pickled: {error}")
                return error_reply(row, wrapped)
        return ok_reply(infos, None)
