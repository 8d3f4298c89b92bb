"""The worker process: builds a group of envs and serves its parent's requests.

Runs in a fresh interpreter (spawn) or a process forked from batchenv's fork server; it
imports only NumPy, cloudpickle and whatever the env constructors need (never torch by
itself). What it is asked and what it answers is :mod:`batchenv.workers.protocol`; the envs
and their stepping are an :class:`~batchenv.workers.env_group.EnvGroup`.

The worker ignores SIGINT (the parent handles Ctrl-C), asks the kernel to kill it when the
launching process dies (PR_SET_PDEATHSIG), and checks while idle that the parent is alive.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
from multiprocessing.connection import Connection
from multiprocessing.reduction import recv_handle

from batchenv.workers import shared_memory
from batchenv.workers.env_group import EnvGroup
from batchenv.workers.liveness import pid_alive, set_parent_death_signal
from batchenv.workers.protocol import (
    GO,
    ROWS,
    STEP_ALL_AHEAD,
    EnvFailure,
    Readable,
    error_reply,
    infos_reply,
    ok_reply,
    read_message,
    rows_of_message,
    spin_wait,
    write_message,
)

IDLE_CHECK_SECONDS = 0.5


class Worker:
    """Serves one parent over ``conn`` with the env group ``init["rows"]`` describes."""

    def __init__(self, conn: Connection, init: dict):
        self.conn = conn
        self.group = EnvGroup(init["rows"])
        self.rows = self.group.rows
        self.watch_pid: int = init["watch_pid"]
        self.spin: float = init.get("spin_seconds", 0.0)

    def build(self, constructors: list) -> list:
        spaces = self.group.build(constructors)
        if "torch" in sys.modules:  # an env that imports torch gets one thread per worker
            sys.modules["torch"].set_num_threads(1)
        return spaces

    def attach(self, layout: list, size: int, observation_space, action_space) -> None:
        fd = recv_handle(self.conn)
        buffers = shared_memory.attach(fd, size, layout, observation_space, action_space)
        self.group.attach(buffers, observation_space, action_space)

    def handle(self, request: tuple):
        command, group = request[0], self.group
        if command == "call":
            return group.call(*request[1:])
        if command == "getattr":
            return group.get_attr(*request[1:])
        if command == "setattr":
            return group.set_attr(*request[1:])
        if command == "commands":
            return group.run_commands(*request[1:])
        if command == "attach":
            return self.attach(*request[1:])
        raise ValueError(f"unknown request {command!r}")

    def step(self, message: bytes) -> dict | None:
        """The fast messages: GO, ROWS, STEP_ALL and STEP_ALL_AHEAD."""
        if message == GO:
            return self.group.run_commands(None)
        if message[:1] == ROWS:
            return self.group.run_commands(None, rows_of_message(message))
        return self.group.step_all(message == STEP_ALL_AHEAD)

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
                if not pid_alive(self.watch_pid):
                    raise EOFError("the parent process is gone")
                continue
            message = read_message(fd)
            if len(message) == 1 or message[:1] == ROWS:
                try:
                    infos = self.step(message)
                except EnvFailure as failure:
                    conn.send_bytes(error_reply(failure.row, failure.error))
                    continue
                if infos is None:
                    write_message(fd, b"")
                else:
                    conn.send_bytes(infos_reply(infos))
                spin_after_step = self.spin > 0.0
                continue
            request = pickle.loads(message)
            if request[0] == "close":
                conn.send_bytes(pickle.dumps(("ok", self.group.close_envs())))
                return
            try:
                result = self.handle(request)
            except EnvFailure as failure:
                conn.send_bytes(error_reply(failure.row, failure.error))
                continue
            except BaseException as error:
                conn.send_bytes(error_reply(None, error))
                continue
            if request[0] == "commands" and result:
                conn.send_bytes(infos_reply(result))
            else:
                row = self.rows[request[1]] if request[0] in ("call", "getattr") else None
                conn.send_bytes(ok_reply(result, row))


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
    except EnvFailure as failure:
        _send_quietly(conn, error_reply(failure.row, failure.error))
        _exit(worker, 1)
    except BaseException as error:
        _send_quietly(conn, error_reply(None, error))
        _exit(worker, 1)
    _send_quietly(conn, ok_reply(spaces, None))
    try:
        worker.serve()
    except (EOFError, OSError):  # the parent is gone without closing us: close the envs
        worker.group.close_envs()
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
