"""Starting worker processes: "spawn" (a fresh interpreter) or "forkserver" (forked from a
private server that has preloaded NumPy and Gymnasium).

Neither imports the parent's ``__main__`` module (unlike multiprocessing), so a training
script that imports torch does not make every worker import torch too. The parent gets a
``WorkerProcess``: a connected socket ``Connection`` plus the means to wait for and kill the
child. Workers set PR_SET_PDEATHSIG and watch the parent's pid, so they never outlive it.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection

from batchenv.workers.liveness import pid_alive, set_parent_death_signal, started_by_main_thread

START_METHODS = ("forkserver", "spawn")

_CHILD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


def _package_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _child_environment() -> dict:
    env = dict(os.environ)
    env.update(_CHILD_ENV)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [_package_root(), env.get("PYTHONPATH")]))
    return env


class WorkerProcess:
    """A started worker: ``conn`` talks to it; ``exitcode()``, ``kill()`` and ``join()``."""

    def __init__(
        self, pid: int, conn: Connection, popen: subprocess.Popen | None, server: _ForkServer | None
    ):
        self.pid = pid
        self.conn = conn
        self._popen = popen
        self._server = server  # the fork server that forked it (it reaps the worker)
        self._exitcode: int | None = None

    def exitcode(self, wait: float = 0.0) -> int | None:
        """The exit status (negative: killed by that signal), or None while it runs."""
        if self._exitcode is not None:
            return self._exitcode
        deadline = time.monotonic() + wait
        while True:
            if self._popen is not None:
                code = self._popen.poll()
            else:
                code = self._server.exit_status(self.pid) if self._server.alive() else None
                if code is None and not self._server.alive() and not pid_alive(self.pid):
                    break  # its server died: the status is lost, but it is gone
            if code is not None or time.monotonic() >= deadline:
                break
            time.sleep(0.005)
        self._exitcode = code
        return code

    def join(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the process to end; True when it has."""
        return self.exitcode(wait=timeout) is not None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.exitcode() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass


def start_worker(start_method: str = "forkserver") -> WorkerProcess:
    """Start one worker process running :func:`batchenv.workers.server.main`."""
    if start_method not in START_METHODS:
        raise ValueError(f"start_method must be one of {START_METHODS}, got {start_method!r}")
    parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if start_method == "spawn":
            fd = child_sock.fileno()
            code = (
                f"from batchenv.workers.server import main; main({fd}, {started_by_main_thread()})"
            )
            popen = subprocess.Popen(
                [sys.executable, "-c", code],
                pass_fds=(fd,),
                stdin=subprocess.DEVNULL,
                env=_child_environment(),
                close_fds=True,
            )
            pid = popen.pid
        else:
            popen = None
            server = _fork_server()
            pid = server.fork(child_sock.fileno())
    finally:
        child_sock.close()
    return WorkerProcess(
        pid, Connection(parent_sock.detach()), popen, server if popen is None else None
    )


# ----------------------------------------------------------------------------- fork server


class _ForkServer:
    """A child interpreter that forks workers on request.

    Requests over a socket: b"F" with one fd (the worker's socket) -> the new pid (8 bytes);
    b"W" + pid -> its exit status, or a sentinel while it runs. The server exits when the
    parent's end of the socket closes; its children then die by PR_SET_PDEATHSIG.
    """

    RUNNING = -(2**31)
    UNKNOWN = -(2**31) + 1

    def __init__(self):
        parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        fd = child_sock.fileno()
        code = (
            "from batchenv.workers.launch import serve_forks; "
            f"serve_forks({fd}, {started_by_main_thread()})"
        )
        self.popen = subprocess.Popen(
            [sys.executable, "-c", code],
            pass_fds=(fd,),
            stdin=subprocess.DEVNULL,
            env=_child_environment(),
            close_fds=True,
        )
        child_sock.close()
        self.sock = parent_sock
        self.sock.settimeout(60.0)
        self.lock = threading.Lock()

    def alive(self) -> bool:
        return self.popen.poll() is None

    def fork(self, fd: int) -> int:
        with self.lock:
            socket.send_fds(self.sock, [b"F" + bytes(8)], [fd])
            return struct.unpack("q", _recv_exact(self.sock, 8))[0]

    def exit_status(self, pid: int) -> int | None:
        """Exit status of a worker it forked; None while running or when unknown."""
        try:
            with self.lock:
                socket.send_fds(self.sock, [b"W" + struct.pack("q", pid)], [])
                code = struct.unpack("q", _recv_exact(self.sock, 8))[0]
        except (ConnectionError, OSError):
            return None
        return None if code in (self.RUNNING, self.UNKNOWN) else code

    def stop(self) -> None:
        try:
            self.sock.close()
        finally:
            try:
                self.popen.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


_SERVER: _ForkServer | None = None
_SERVER_LOCK = threading.Lock()


def _fork_server() -> _ForkServer:
    global _SERVER
    with _SERVER_LOCK:
        if _SERVER is None or not _SERVER.alive() or _SERVER.popen.pid is None:
            _SERVER = _ForkServer()
        return _SERVER


def fork_server_pid() -> int | None:
    """Pid of the running fork server, if one was started (it lives until exit)."""
    server = _SERVER
    return server.popen.pid if server is not None and server.alive() else None


@atexit.register
def _stop_fork_server() -> None:
    if _SERVER is not None:
        _SERVER.stop()


def _recv_exact(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise ConnectionError("the batchenv fork server exited")
        data += chunk
    return data


def serve_forks(fd: int, pdeathsig: bool) -> None:
    """Main loop of the fork server process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if pdeathsig:
        set_parent_death_signal()
    preload = ("numpy", "cloudpickle", "gymnasium", "batchenv.compat", "batchenv.workers.server")
    for module in preload:
        try:
            __import__(module)
        except ImportError:
            pass
    sock = socket.socket(fileno=fd)
    sock.settimeout(1.0)
    statuses: dict[int, int] = {}
    children: set[int] = set()
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(sock, 9, 1)
        except TimeoutError:
            _reap(children, statuses)
            continue
        except OSError:
            break
        if not message:
            break
        if len(message) < 9:
            message += _recv_exact(sock, 9 - len(message))
        if message[:1] == b"F":
            pid = os.fork()
            if pid == 0:
                sock.close()
                set_parent_death_signal()
                from batchenv.workers.server import main

                main(fds[0])
                os._exit(0)
            os.close(fds[0])
            children.add(pid)
            sock.sendall(struct.pack("q", pid))
        elif message[:1] == b"W":
            pid = struct.unpack("q", message[1:9])[0]
            _reap(children, statuses)
            status = statuses.get(
                pid, _ForkServer.RUNNING if pid in children else _ForkServer.UNKNOWN
            )
            sock.sendall(struct.pack("q", status))
    os._exit(0)


def _reap(children: set[int], statuses: dict[int, int]) -> None:
    for pid in list(children):
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            children.discard(pid)
            statuses[pid] = -1
            continue
        if done:
            children.discard(pid)
            statuses[pid] = os.waitstatus_to_exitcode(status)
