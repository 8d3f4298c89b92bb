"""The worker process: builds a group of envs and serves requests from its parent.

Runs in a fresh interpreter (spawn) or a process forked from batchenv's fork server; it
imports only NumPy, cloudpickle and whatever the env constructors need (never torch by
itself). Messages over one socket ``Connection``:

- a pickled request tuple ``(command, ...)`` -> a pickled ``("ok", result)`` or
  ``("error", env_index, exception_bytes, type_name, message, traceback_text)``;
- the single byte ``b"G"`` (shared-memory mode): run the per-env commands written in the
  shared ``command`` array (step, reset) for this worker's rows, write results into shared
  memory, reply ``b""`` (or a pickled ``("ok", infos)`` when some info dict is non-empty);
- ``b"S"`` / ``b"A"``: every row steps (as STEP / STEP_AHEAD), the command array unread;
  replies as for ``b"G"``.

The worker ignores SIGINT (the parent handles Ctrl-C), asks the kernel to kill it when the
launching process dies (PR_SET_PDEATHSIG), and checks while idle that the parent is alive.
"""

from __future__ import annotations

import copyreg
import functools
import io
import math
import mmap
import os
import pickle
import select
import signal
import struct
import sys
import time
import traceback
from multiprocessing.connection import Connection
from multiprocessing.reduction import recv_handle

import numpy as np

# Per-row commands in the shared ``command`` array. SAME_STEP steps and, when the episode
# ends, resets at once (Gymnasium's SAME_STEP autoreset); its info is then the tuple
# ("same_step", final_observ, final_info, reset_info).
# STEP_AHEAD steps and, when the episode ends, keeps the terminal observation in ``observ``
# and resets at once into the ``ahead`` buffers, so the parent's later reset(indices) needs
# no round trip; its info is then ("reset_ahead", step_info, reset_info).
IDLE, STEP, RESET, SAME_STEP, STEP_AHEAD = 0, 1, 2, 3, 4
GO = b"G"
STEP_ALL, STEP_ALL_AHEAD = b"S", b"A"
IDLE_CHECK_SECONDS = 0.5


_LENGTH = struct.Struct("!i")  # the frame header of Connection.send_bytes


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


def set_parent_death_signal() -> None:
    """Ask Linux to SIGKILL this process when its parent thread exits (no-op elsewhere)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def error_reply(env_index: int | None, error: BaseException) -> bytes:
    """Pickle an exception with its type and traceback, even when it cannot be pickled."""
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    try:
        payload = pickle.dumps(error)
        pickle.loads(payload)
    except Exception:
        payload = b""
    return pickle.dumps(("error", env_index, payload, type(error).__name__, str(error), text))


class SharedBuffers:
    """NumPy views of the shared-memory block, named as in the parent's layout."""

    def __init__(self, fd: int, size: int, layout: list[tuple[str, int, tuple, str]]):
        self._mmap = mmap.mmap(fd, size)
        os.close(fd)
        self.arrays = {}
        for name, offset, shape, dtype in layout:
            count = int(np.prod(shape, dtype=np.int64))
            self.arrays[name] = np.frombuffer(self._mmap, np.dtype(dtype), count, offset).reshape(
                shape
            )


class Worker:
    """Holds this process's envs and answers the parent's requests."""

    def __init__(self, conn: Connection, init: dict):
        self.conn = conn
        self.rows: list[int] = [int(row) for row in init["rows"]]
        self.watch_pid: int = init["watch_pid"]
        self.spin: float = init.get("spin_seconds", 0.0)
        self.envs: list = []
        self.fast = None

    def build(self, constructors: list) -> list:
        from batchenv.compat import to_gymnasium

        for row, constructor in zip(self.rows, constructors):
            try:
                self.envs.append(to_gymnasium(constructor()))
            except BaseException as error:
                raise _EnvFailure(row, error) from error
        if "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(1)
        return [(env.observation_space, env.action_space) for env in self.envs]

    def attach(self, layout: list, size: int, observation_space, action_space) -> None:
        from batchenv import spaces as batch_spaces

        fd = recv_handle(self.conn)
        buffers = SharedBuffers(fd, size, layout).arrays
        n_obs = len(batch_spaces.leaves(observation_space))
        n_act = len(batch_spaces.leaves(action_space))
        observ = [buffers[f"observ{i}"] for i in range(n_obs)]
        ahead = [buffers[f"ahead{i}"] for i in range(n_obs)]
        action = [buffers[f"action{i}"] for i in range(n_act)]
        self.row_array = np.asarray(self.rows, dtype=np.int64)
        self.block = _observ_block(observation_space, observ, self.rows)
        self.fast = (
            buffers["command"],
            batch_spaces.make_rows_reader(action_space, action),
            batch_spaces.make_row_writer(observation_space, observ),
            batch_spaces.make_row_writer(observation_space, ahead),
            buffers["reward"],
            buffers["terminated"],
            buffers["truncated"],
        )

    def run_commands(self, reset_args: dict | None) -> dict | None:
        """Execute the shared per-row commands for this worker's envs.

        Commands and actions are read with one NumPy call each, and rewards and flags are
        written back with one call each: per env, only ``env.step`` and the observation
        write remain.
        """
        command, read_actions, write_observ, write_ahead, reward, terminated, truncated = self.fast
        rows = self.row_array
        todos = command[rows].tolist()
        actions = read_actions(rows)
        rewards = reward[rows].tolist()
        terms = terminated[rows].tolist()
        truncs = truncated[rows].tolist()
        infos = None
        for k, env in enumerate(self.envs):
            todo = todos[k]
            if todo == IDLE:
                continue
            try:
                if todo == RESET:
                    seed, options = (
                        reset_args.get(rows[k], (None, None)) if reset_args else (None, None)
                    )
                    observ, info = env.reset(seed=seed, options=options)
                    rewards[k], terms[k], truncs[k] = 0.0, False, False
                else:
                    observ, rewards[k], terms[k], truncs[k], info = env.step(actions[k])
                    if todo == SAME_STEP and (terms[k] or truncs[k]):
                        final_observ, final_info = observ, info
                        observ, info = env.reset()
                        info = ("same_step", final_observ, final_info, info)
                    elif todo == STEP_AHEAD and (terms[k] or truncs[k]):
                        next_observ, next_info = env.reset()
                        write_ahead(rows[k], next_observ)
                        if info or next_info:
                            info = ("reset_ahead", info, next_info)
                write_observ(rows[k], observ)
            except BaseException as error:
                raise _EnvFailure(int(rows[k]), error) from error
            if info:
                if infos is None:
                    infos = {}
                infos[int(rows[k])] = info
        reward[rows] = rewards
        terminated[rows] = terms
        truncated[rows] = truncs
        return infos

    def step_all(self, ahead: bool) -> dict | None:
        """Step every env of this worker (the ``b"S"``/``b"A"`` messages): STEP, or
        STEP_AHEAD when ``ahead``, with no per-row command to read.

        The common case of a training loop, so the per-env work is only ``env.step``, a
        shape check and list appends; observations of a flat space are written with one
        NumPy assignment for the whole group of rows.
        """
        _, read_actions, write_observ, write_ahead, reward, terminated, truncated = self.fast
        rows, block = self.rows, self.block
        actions = read_actions(self.row_array)
        observs, rewards, terms, truncs = [], [], [], []
        shape = block[0] if block is not None else None
        infos = None
        for k, env in enumerate(self.envs):
            try:
                observ, rew, term, trunc, info = env.step(actions[k])
                if ahead and (term or trunc):
                    next_observ, next_info = env.reset()
                    write_ahead(rows[k], next_observ)
                    if info or next_info:
                        info = ("reset_ahead", info, next_info)
                if shape is None or getattr(observ, "shape", None) != shape:
                    write_observ(rows[k], observ)  # its shape check names what was expected
            except BaseException as error:
                raise _EnvFailure(rows[k], error) from error
            observs.append(observ)
            rewards.append(rew)
            terms.append(term)
            truncs.append(trunc)
            if info:
                if infos is None:
                    infos = {}
                infos[rows[k]] = info
        if block is not None:
            try:
                block[1][...] = observs
            except (ValueError, TypeError):  # store row by row, naming a row that fails
                for row, observ in zip(rows, observs):
                    try:
                        write_observ(row, observ)
                    except BaseException as error:
                        raise _EnvFailure(row, error) from error
        rows = self.row_array
        reward[rows] = rewards
        terminated[rows] = terms
        truncated[rows] = truncs
        return infos

    def handle(self, request: tuple):
        command = request[0]
        if command == "call":
            _, slot, name, args, kwargs = request
            try:
                return getattr(self.envs[slot], name)(*args, **kwargs)
            except BaseException as error:
                raise _EnvFailure(self.rows[slot], error) from error
        if command == "getattr":
            return _get_env_attr(self.envs[request[1]], request[2], self.rows[request[1]])
        if command == "setattr":
            _, slot, name, value = request
            setattr(self.envs[slot], name, value)
            return None
        if command == "commands":
            return self.run_commands(request[1])
        if command == "attach":
            return self.attach(*request[1:])
        raise ValueError(f"unknown request {command!r}")

    def close_envs(self) -> list[str]:
        problems = []
        for env, row in zip(self.envs, self.rows):
            try:
                env.close()
            except BaseException as error:
                problems.append(f"env {row}: {type(error).__name__}: {error}")
        return problems

    def serve(self) -> None:
        conn = self.conn
        fd = conn.fileno()
        readable = Readable(conn)
        spin_after_step = False
        while True:
            if spin_after_step:  # the next step usually follows at once: skip the wake-up
                spin_after_step = False
                spin_wait(readable, self.spin)
            if not readable(IDLE_CHECK_SECONDS):
                if not _pid_alive(self.watch_pid):
                    raise EOFError("the parent process is gone")
                continue
            message = read_message(fd)
            if len(message) == 1:  # GO, STEP_ALL or STEP_ALL_AHEAD
                try:
                    if message == GO:
                        infos = self.run_commands(None)
                    else:
                        infos = self.step_all(message == STEP_ALL_AHEAD)
                except _EnvFailure as failure:
                    conn.send_bytes(error_reply(failure.row, failure.error))
                    continue
                if infos is None:
                    write_message(fd, b"")
                else:
                    conn.send_bytes(_dump_infos(infos))
                spin_after_step = self.spin > 0.0
                continue
            request = pickle.loads(message)
            if request[0] == "close":
                conn.send_bytes(pickle.dumps(("ok", self.close_envs())))
                return
            try:
                result = self.handle(request)
            except _EnvFailure as failure:
                conn.send_bytes(error_reply(failure.row, failure.error))
                continue
            except BaseException as error:
                conn.send_bytes(error_reply(None, error))
                continue
            if request[0] == "commands" and result:
                conn.send_bytes(_dump_infos(result))
            else:
                row = self.rows[request[1]] if request[0] in ("call", "getattr") else None
                conn.send_bytes(_dump_ok(result, row))


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


class _EnvFailure(Exception):
    def __init__(self, row: int, error: BaseException):
        super().__init__(row, error)
        self.row = row
        self.error = error


def _dump_ok(result, row: int | None) -> bytes:
    try:
        return pickle.dumps(("ok", result))
    except Exception as error:  # an unpicklable reply is the env's fault; say so
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


def _dumps_infos(infos: dict) -> bytes:
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = _SCALARS_BY_VALUE
    pickler.dump(("ok", infos))
    return buffer.getvalue()


def _dump_infos(infos: dict) -> bytes:
    """Pickle the per-row infos; when one cannot be pickled, blame its row."""
    try:
        return _dumps_infos(infos)
    except Exception:
        for row, info in infos.items():
            try:
                pickle.dumps(info)
            except Exception as error:
                wrapped = TypeError(f"the info returned by env {row} could not be pickled: {error}")
                return error_reply(row, wrapped)
        return _dump_ok(infos, None)


def _observ_block(space, observ: list[np.ndarray], rows: list[int]):
    """``(shape, block)`` when this worker's observations can be written in one
    assignment: a single float leaf (integer leaves need per-value range checks) and
    consecutive rows; ``block`` is the view of those rows. None otherwise."""
    from batchenv import spaces as batch_spaces

    leaves = batch_spaces.leaves(space)
    if len(leaves) != 1 or observ[0].dtype.kind != "f":
        return None
    if rows != list(range(rows[0], rows[0] + len(rows))):
        return None
    shape = batch_spaces.leaf_layout(leaves[0])[0]
    return shape, observ[0][rows[0] : rows[0] + len(rows)]


def _get_env_attr(env, name: str, row: int):
    try:
        return getattr(env, name)
    except AttributeError:
        try:
            return env.get_wrapper_attr(name)
        except AttributeError as error:
            raise _EnvFailure(row, error) from error


def main(fd: int, pdeathsig: bool = True) -> None:
    """Entry point of a worker: ``fd`` is this end of the socket to the parent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if pdeathsig:
        set_parent_death_signal()
    conn = Connection(fd)
    try:
        init = pickle.loads(conn.recv_bytes())
    except (EOFError, OSError):
        os._exit(0)
    sys.path[:] = init["sys_path"]
    if init.get("cwd"):
        try:
            os.chdir(init["cwd"])
        except OSError:
            pass
    worker = Worker(conn, init)
    try:
        constructors = pickle.loads(init["constructors"])
        spaces = worker.build(constructors)
    except _EnvFailure as failure:
        _send_quietly(conn, error_reply(failure.row, failure.error))
        _exit(worker, 1)
    except BaseException as error:
        _send_quietly(conn, error_reply(None, error))
        _exit(worker, 1)
    _send_quietly(conn, _dump_ok(spaces, None))
    try:
        worker.serve()
    except (EOFError, OSError):  # the parent is gone without closing us: close the envs
        worker.close_envs()
    _exit(worker, 0)


def _send_quietly(conn: Connection, payload: bytes) -> None:
    try:
        conn.send_bytes(payload)
    except OSError:
        pass


def _exit(worker: Worker, code: int) -> None:
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)
